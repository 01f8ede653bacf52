package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jailcell/jailcell/api"
	"github.com/jailcell/jailcell/api/httpapi"
)

// The installed path, end to end, as a client of the service sees it:
// the socket and its directory, whether this user reaches the service,
// whether clients can read what they need of the configuration, and the
// systemd units. Every check reads; none changes the host.

// systemdUnitDir is where make install puts the units (SYSTEMD_DIR); a
// variable so that a test can check a tree of its own.
var systemdUnitDir = "/etc/systemd/system"

// systemdRunning reports whether systemd is PID 1 (sd_booted's test).
var systemdRunning = func() bool {
	fi, err := os.Lstat("/run/systemd/system")
	return err == nil && fi.IsDir()
}

// serviceChecks are the doctor's lines for the service: socket, its
// directory, reaching it, the config file and the units.
func serviceChecks(cfg *config) []*check {
	group := cfg.SocketGroup
	g, gidErr := lookupGroup(group)
	gid := int(g)
	if cfg.Unreadable != nil {
		// A client that cannot read the service's configuration does not
		// know socket_group: the group the service gave its socket (or
		// its directory) is the one to be in.
		for _, p := range []string{cfg.Socket, filepath.Dir(cfg.Socket)} {
			if fi, err := os.Stat(p); err == nil {
				_, gid = statOwner(fi)
				group, gidErr = groupName(gid), nil
				break
			}
		}
	}
	checks := []*check{
		checkSocketDir(filepath.Dir(cfg.Socket), gid, gidErr, group),
		checkSocket(cfg.Socket, gid, gidErr, group),
		checkReach(cfg.Socket, group),
	}
	if !serviceListening(cfg.Socket) {
		// No service here (none installed, or stopped): what these found
		// says nothing about this host's sandboxes, and serve sets the
		// socket directory's owner and mode itself when it starts (a
		// directory left 0700 by a daemon's uid claims included).
		for _, c := range checks {
			if c.status != statusOK {
				c.status = statusNote
			}
		}
	}
	return append(checks, checkClientConfig(cfg), checkUnits(systemdUnitDir, systemdRunning()))
}

// serviceListening reports whether a service may be listening on sock:
// false only when nothing is there to connect to (no socket, or a socket
// file nobody listens on). A socket this user may not reach counts as
// listening: that is the service's problem to report.
func serviceListening(sock string) bool {
	c, err := net.DialTimeout("unix", sock, 2*time.Second)
	if err == nil {
		c.Close()
		return true
	}
	return !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ECONNREFUSED)
}

// groupName is gid's name, or the number if it has none.
func groupName(gid int) string {
	if g, err := user.LookupGroupId(strconv.Itoa(gid)); err == nil {
		return g.Name
	}
	return strconv.Itoa(gid)
}

func statOwner(fi fs.FileInfo) (uid, gid int) {
	st := fi.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid)
}

func checkSocketDir(dir string, gid int, gidErr error, group string) *check {
	c := &check{name: "socket dir"}
	fi, err := os.Stat(dir)
	if err != nil {
		c.status, c.found = statusWarn, err.Error()
		c.fix = "start the service (systemctl start jailcell.socket, or jailcell serve: docs/service.md); it creates " + dir
		return c
	}
	uid, g := statOwner(fi)
	c.found = fmt.Sprintf("%s %v %d:%d", dir, fi.Mode().Perm(), uid, g)
	switch {
	case gidErr != nil:
		c.status, c.found = statusWarn, c.found+fmt.Sprintf("; socket_group %q does not exist: only root can connect", group)
		c.fix = "groupadd --system " + group
	case g == gid && fi.Mode().Perm()&0o010 != 0:
		c.status = statusOK
	case fi.Mode().Perm()&0o001 != 0:
		c.status = statusOK // shared (/tmp): the socket's own mode decides
	default:
		c.status, c.found = statusFail, c.found+fmt.Sprintf("; members of %s cannot enter it", group)
		c.fix = fmt.Sprintf("restart the service (serve makes it 0750 root:%s), or chgrp %s %s && chmod 0750 %s", group, group, dir, dir)
	}
	return c
}

func checkSocket(path string, gid int, gidErr error, group string) *check {
	c := &check{name: "socket"}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		c.status, c.found = statusWarn, path+": no socket (the service is not running)"
		c.fix = "systemctl enable --now jailcell.socket, or start jailcell serve under your supervisor (docs/service.md)"
		return c
	case err != nil:
		c.status, c.found = statusFail, err.Error()
		c.fix = "run doctor as root or as a member of " + group
		return c
	case fi.Mode().Type() != fs.ModeSocket:
		c.status, c.found, c.fix = statusFail, path+" is not a socket", "remove it and restart the service"
		return c
	}
	uid, g := statOwner(fi)
	c.found = fmt.Sprintf("%s %v %d:%d", path, fi.Mode().Perm(), uid, g)
	switch {
	case gidErr == nil && g == gid && fi.Mode().Perm()&0o060 == 0o060 && fi.Mode().Perm()&0o007 == 0:
		c.status = statusOK
		c.found += " (group " + group + " may connect)"
	case fi.Mode().Perm()&0o007 != 0:
		c.status, c.found = statusWarn, c.found+"; anyone may connect (the peer check still decides who may call)"
		c.fix = "socket mode 0660 (jailcell.socket's SocketMode)"
	default:
		c.status, c.found = statusFail, c.found+fmt.Sprintf("; members of %s cannot connect", group)
		c.fix = fmt.Sprintf("make the socket's group %s and mode 0660 (SocketGroup and SocketMode in jailcell.socket; socket_group for serve)", group)
	}
	return c
}

// checkReach connects as the calling user and asks for /healthz.
func checkReach(sock, group string) *check {
	c := &check{name: "reach service"}
	me := strconv.Itoa(os.Getuid())
	if u, err := user.Current(); err == nil {
		me = u.Username
	}
	r := httpapi.NewRemote(sock)
	defer r.Close()
	err := r.Reachable(context.Background(), 5*time.Second)
	var refused *api.Error
	switch {
	case err == nil:
		c.status, c.found = statusOK, "uid "+me+" reached "+sock+" and was admitted (/healthz)"
	case errors.As(err, &refused):
		c.status, c.found = statusFail, "uid "+me+" connects but is refused: "+err.Error()
		c.fix = "add the user or group to allowed_uids/allowed_gids in the service's config, then systemctl reload jailcell (or SIGHUP serve)"
	case errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EACCES):
		c.status, c.found = statusFail, "uid "+me+" may not connect: "+err.Error()
		c.fix = fmt.Sprintf("usermod -aG %s %s, then log in again (newgrp %s)", group, me, group)
	default:
		c.status, c.found = statusWarn, err.Error()
		c.fix = "start the service (docs/service.md)"
	}
	return c
}

// checkClientConfig: clients need nothing from the service's file but its
// socket; one they cannot read and that moves the socket leaves them
// looking in the wrong place.
func checkClientConfig(cfg *config) *check {
	c := &check{name: "client config", status: statusOK}
	path := cfg.File
	if path == "" {
		path = defaultConfigPath
	}
	fi, err := os.Stat(path)
	if err != nil {
		c.found = path + ": none; clients use the default socket " + defaultSocket
		return c
	}
	perm := fi.Mode().Perm()
	if perm&0o004 != 0 {
		c.found = fmt.Sprintf("%s %v: readable by every user", path, perm)
		return c
	}
	c.found = fmt.Sprintf("%s %v: clients that cannot read it use %s", path, perm, defaultSocket)
	if cfg.Unreadable != nil {
		c.found = fmt.Sprintf("%s: unreadable to this user (%v); clients use JAILCELL_SOCKET, --connect or %s", path, cfg.Unreadable, defaultSocket)
	}
	if cfg.Socket != defaultSocket && cfg.sources["socket"] == "file" {
		c.status = statusWarn
		c.found += "; but the file moves the socket to " + cfg.Socket
		c.fix = "give clients JAILCELL_SOCKET=" + cfg.Socket + " (or --connect=" + cfg.Socket + ")"
	}
	return c
}

// checkUnits: with systemd, the units make install writes, and whether
// the socket unit is enabled (systemctl enable links it into a .wants).
func checkUnits(dir string, systemd bool) *check {
	c := &check{name: "systemd units"}
	if !systemd {
		c.status, c.found = statusOK, "systemd is not running here: start `jailcell serve` under your supervisor (docs/service.md, no systemd)"
		return c
	}
	var missing []string
	for _, u := range []string{"jailcell.service", "jailcell.socket"} {
		if _, err := os.Stat(filepath.Join(dir, u)); err != nil {
			missing = append(missing, u)
		}
	}
	if len(missing) > 0 {
		// Not installed: a development host, or another supervisor.
		c.status, c.found, c.fix = statusNote, fmt.Sprintf("%v not in %s: the service is not installed here", missing, dir), "make install, to run it as a service"
		return c
	}
	enabled := ""
	for _, link := range []string{"sockets.target.wants/jailcell.socket", "multi-user.target.wants/jailcell.service"} {
		if _, err := os.Lstat(filepath.Join(dir, link)); err == nil {
			enabled = link
			break
		}
	}
	if enabled == "" {
		c.status, c.found = statusWarn, "jailcell.service and jailcell.socket installed in "+dir+", not enabled"
		c.fix = "systemctl enable --now jailcell.socket"
		return c
	}
	c.status, c.found = statusOK, "installed in "+dir+", enabled ("+enabled+")"
	return c
}
