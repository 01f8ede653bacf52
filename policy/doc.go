// Package policy holds the typed limits a sandbox is built from and their
// validation. It is the bottom of the house: it imports nothing of jailcell
// and must never learn how a limit is enforced, only what it is.
package policy
