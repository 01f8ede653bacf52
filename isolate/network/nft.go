package network

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"

	"github.com/jailcell/jailcell/policy"
)

// The gateway's packet filter, in nftables' own language: the ruleset
// built from a policy, and the one way to run nft inside a gateway.

// ruleset is the gateway's whole nftables configuration. Forwarding is
// closed but for: replies, explicitly listed addresses inside special
// ranges, and (once special ranges are refused) the pinned addresses of
// listed names and the listed public addresses and prefixes. Everything
// else is counted into the refused set and rejected at once, so a refused
// connect fails fast instead of timing out.
func ruleset(p policy.Policy) string {
	var special, rest []string
	for _, a := range p.Entries() {
		pr, ok := a.Prefix()
		if !ok {
			continue
		}
		rule := fmt.Sprintf("iifname %q oifname %q ct state new meta l4proto { tcp, udp } ip daddr %s th dport { %s } counter name \"tx\" accept", sbLink, upLink, pr, ports(a.Ports))
		if policy.InsideSpecial(pr) {
			special = append(special, rule)
		} else {
			rest = append(rest, rule)
		}
	}
	var sp []string
	for _, s := range policy.Special {
		sp = append(sp, s.String())
	}
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s {\n", nftTable)
	b.WriteString("counter tx {\n}\ncounter rx {\n}\ncounter refusedall {\n}\n")
	b.WriteString("set pins { type ipv4_addr . inet_service; size 65536; }\n")
	b.WriteString("set refused { type ipv4_addr . inet_service; size 4096; flags dynamic; counter; }\n")
	fmt.Fprintf(&b, "set special { type ipv4_addr; flags interval; elements = { %s }; }\n", strings.Join(sp, ", "))
	b.WriteString("chain input {\ntype filter hook input priority 0; policy drop;\n")
	b.WriteString("iif \"lo\" accept\nct state established,related accept\n")
	fmt.Fprintf(&b, "iifname %q ip daddr %s udp dport 53 accept\n", sbLink, gwAddr)
	fmt.Fprintf(&b, "iifname %q reject with icmpx type admin-prohibited\n}\n", sbLink)
	b.WriteString("chain forward {\ntype filter hook forward priority 0; policy drop;\n")
	fmt.Fprintf(&b, "iifname %q oifname %q ct state established,related counter name \"rx\" accept\n", upLink, sbLink)
	fmt.Fprintf(&b, "iifname %q oifname %q ct state established,related counter name \"tx\" accept\n", sbLink, upLink)
	for _, r := range special {
		b.WriteString(r + "\n")
	}
	fmt.Fprintf(&b, "iifname %q ip daddr @special goto refuse\n", sbLink)
	fmt.Fprintf(&b, "iifname %q oifname %q ct state new meta l4proto { tcp, udp } ip daddr . th dport @pins counter name \"tx\" accept\n", sbLink, upLink)
	for _, r := range rest {
		b.WriteString(r + "\n")
	}
	fmt.Fprintf(&b, "iifname %q goto refuse\n}\n", sbLink)
	// refusedall counts every refused attempt; the refused set (bounded by
	// nftables) names the destinations.
	b.WriteString("chain refuse {\nmeta l4proto { tcp, udp } counter name \"refusedall\"\n")
	b.WriteString("meta l4proto { tcp, udp } update @refused { ip daddr . th dport }\n")
	b.WriteString("reject with icmpx type admin-prohibited\n}\n")
	fmt.Fprintf(&b, "chain postrouting {\ntype nat hook postrouting priority srcnat;\noifname %q masquerade\n}\n}\n", upLink)
	return b.String()
}

func ports(ps []uint16) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ", ")
}

// nft runs nft -f - with script inside the gateway namespace (the child
// inherits the namespace of the thread that forks it).
func (g *Gateway) nft(script string, args ...string) error {
	_, err := g.nftOut(script, args...)
	return err
}

func (g *Gateway) nftOut(stdin string, args ...string) ([]byte, error) {
	g.nftMu.Lock()
	defer g.nftMu.Unlock()
	// Close releases the namespace under nftMu: a DNS answer pinned as it
	// closed would otherwise run nft with the handle closed (-1: in the
	// daemon's own namespace) or, its number reused, in another sandbox's
	// gateway, opening those addresses to that sandbox.
	if !g.ns.IsOpen() {
		return nil, errors.New("nft: the gateway is closed")
	}
	if len(args) == 0 {
		args = []string{"-f", "-"}
	}
	var out []byte
	err := inNetns(g.ns, func() error {
		cmd := exec.Command("nft", args...)
		cmd.Stdin = strings.NewReader(stdin)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		var err error
		out, err = cmd.Output()
		if err != nil {
			return fmt.Errorf("nft %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
		}
		return nil
	})
	return out, err
}

// parseCounters reads the gateway table's counters and refused set from
// `nft -j list table`; the refused destinations carry no name yet.
func parseCounters(out []byte) (NetUsage, error) {
	var doc struct {
		Nftables []struct {
			Counter *struct {
				Name           string
				Packets, Bytes int64
			} `json:"counter"`
			Set *struct {
				Name string
				Elem []json.RawMessage
			} `json:"set"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return NetUsage{}, fmt.Errorf("read gateway counters: %w", err)
	}
	var u NetUsage
	for _, o := range doc.Nftables {
		switch {
		case o.Counter != nil && o.Counter.Name == "tx":
			u.SentBytes, u.SentPackets = o.Counter.Bytes, o.Counter.Packets
		case o.Counter != nil && o.Counter.Name == "rx":
			u.ReceivedBytes, u.ReceivedPackets = o.Counter.Bytes, o.Counter.Packets
		case o.Counter != nil && o.Counter.Name == "refusedall":
			u.RefusedCount += o.Counter.Packets
		case o.Set != nil && o.Set.Name == "refused":
			for _, raw := range o.Set.Elem {
				var e struct {
					Elem struct {
						Val struct {
							Concat []json.RawMessage `json:"concat"`
						} `json:"val"`
						Counter struct{ Packets int64 } `json:"counter"`
					} `json:"elem"`
				}
				if json.Unmarshal(raw, &e) != nil || len(e.Elem.Val.Concat) != 2 {
					continue
				}
				var addr string
				var port uint16
				if json.Unmarshal(e.Elem.Val.Concat[0], &addr) != nil || json.Unmarshal(e.Elem.Val.Concat[1], &port) != nil {
					continue
				}
				n := e.Elem.Counter.Packets
				if n == 0 {
					n = 1 // added by this packet; the counter starts after it
				}
				u.Refused = append(u.Refused, Refused{RefusedKey: RefusedKey{Addr: addr, Port: port, Reason: "not on the allowlist"}, Count: n})
			}
		}
	}
	return u, nil
}
