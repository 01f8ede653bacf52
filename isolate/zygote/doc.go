// Package zygote is the zygote's side of the wire and its helpers: the
// Python program a zygote runs (zygote.py), the fork plan the host sends
// it (what a fork mounts, in order, from detached trees), the bounded
// reader of its answers, and the id mapper that writes a fork's uid and
// gid maps from the zygote's user namespace. isolate's Host drives it
// (StartZygote, Zygote.Fork), checking every fork's posture as it checks
// a cold start's.
//
// It must never import isolate, trust a zygote's answer beyond its bound
// or accept a descriptor from one, and never start anything but the id
// mapper, which joins only the user namespace it is named.
package zygote
