// Package scripts holds checks on the repository's shell scripts and
// Makefile. It reads them and must never run them: they install packages,
// build a rootfs and boot VMs.
package scripts
