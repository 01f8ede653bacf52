package isolate

import (
	"fmt"
	"os"
	"os/exec"

	"github.com/vishvananda/netlink"

	"github.com/jailcell/jailcell/isolate/network"
	"github.com/jailcell/jailcell/policy"
)

// The network types of isolate's surface (Host.SetEgress,
// Sandbox.NetUsage) are defined in network, beside the gateway.
type (
	Egress     = network.Egress
	NetUsage   = network.NetUsage
	Refused    = network.Refused
	RefusedKey = network.RefusedKey
)

// MaxRefusedSample bounds the distinct refused destinations a cell's
// usage lists (network.MaxRefusedSample).
const MaxRefusedSample = network.MaxRefusedSample

// SetEgress configures the upstream of h's allowlisted sandboxes; until it
// is called, such sandboxes are refused.
func (h *Host) SetEgress(e Egress) {
	h.mu.Lock()
	h.egressCfg = e
	h.mu.Unlock()
}

func (h *Host) egress() (Egress, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.egressCfg, h.egressCfg.Upstream != ""
}

// uplinkIndex numbers a sandbox's uplink by its host uid range, not by
// its slot: every daemon on a host plugs its gateways into the same
// upstream namespace, and two daemons numbering by slot would both name
// theirs jcu0 with 100.64.0.1, each removing the other's as stale when it
// builds its own (a fleet of daemons on one host clobbering each other's
// gateways). Daemons have disjoint uid ranges (ClaimUIDRange), so the
// index (hostID / 65536, its bit 14 flipped to keep the default range at
// 0.. as before) is unique on the host, below 65536: "jcu65535" fits in
// IFNAMSIZ, and 65536 /30s fit in 100.64.0.0/10.
func uplinkIndex(hostID int) int { return (hostID/idsPerSlot)&0xffff ^ 0x4000 }

// prepareNetwork fails closed before anything is built when the host cannot
// give what the policy's network asks for, and writes the resolv.conf the
// sandbox's /etc/resolv.conf is bound to.
func (h *Host) prepareNetwork(p policy.Policy, root string) error {
	if p.Network != policy.NetworkAllowlist {
		return nil
	}
	if _, ok := h.egress(); !ok {
		return fmt.Errorf("%w: network %q needs an egress upstream (Host.SetEgress)", ErrUnsupported, p.Network)
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return fmt.Errorf("%w: network %q needs nftables (nft): %v", ErrUnsupported, p.Network, err)
	}
	if err := os.WriteFile(network.ResolvConfPath(root), []byte(network.ResolvConf), 0o644); err != nil {
		return fmt.Errorf("write resolv.conf: %w", err)
	}
	return nil
}

// attachNetwork builds the gateway for the sandbox in slot whose init is
// pid (network.Attach), with its uplink numbered by the slot's host uid
// range (uplinkIndex).
func (h *Host) attachNetwork(p policy.Policy, pid, slot int) (*network.Gateway, error) {
	eg, ok := h.egress()
	if !ok {
		return nil, fmt.Errorf("%w: no egress upstream", ErrUnsupported)
	}
	return network.Attach(p, eg, pid, uplinkIndex(h.cfg.UIDBase+slot*idsPerSlot))
}

// detachNetwork drops s's gateway and removes its link from the sandbox's
// namespace now (the kernel frees a dropped namespace, and the veth with
// it, only later): the sandbox is left with loopback only.
func (s *Sandbox) detachNetwork() error {
	if s.net == nil {
		return nil
	}
	_ = s.net.Close()
	s.net = nil
	sbNS, err := network.SandboxNetns(s.pid)
	if err != nil {
		return err
	}
	defer sbNS.Close()
	hd, err := netlink.NewHandleAt(sbNS)
	if err != nil {
		return fmt.Errorf("netlink sandbox: %w", err)
	}
	defer hd.Close()
	if l, err := hd.LinkByName("eth0"); err == nil {
		if err := hd.LinkDel(l); err != nil {
			return fmt.Errorf("remove the gateway link: %w", err)
		}
	}
	return nil
}

// NetUsage reads the gateway's counters; ok is false for a sandbox without
// a network.
func (s *Sandbox) NetUsage() (NetUsage, bool, error) {
	if s.net == nil {
		return NetUsage{}, false, nil
	}
	u, err := s.net.Usage()
	return u, true, err
}
