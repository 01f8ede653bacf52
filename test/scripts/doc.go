// Package scripts holds checks on the repository's shell scripts and
// Makefile. It reads them and must never run them (they install packages,
// build a rootfs and boot VMs), but for scripts/apt-get.sh, which it runs
// against apt lists and a lock of its own, with no sources.
package scripts
