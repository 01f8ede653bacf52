// Package network builds the egress gateway of a sandbox whose policy's
// network is "allowlist": an anonymous gateway network namespace joined to
// the sandbox by one veth pair and to the operator's upstream by another,
// its nftables ruleset, its DNS server (which answers only listed names and
// pins what they resolve to) and the counters read back as NetUsage.
// docs/egress.md describes the design.
//
// Everything the sandbox sends is untrusted: the DNS server and the
// counters' reader are bounded whatever the cell asks. It must never
// install anything in the host's own network namespace or tables, let a
// listed name resolve the sandbox into a private or special range that is
// not itself listed, or leave a gateway running after Close. It knows
// nothing of hosts, slots or sandboxes; isolate numbers the uplink and
// calls Attach.
package network
