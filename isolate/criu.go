package isolate

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/opencontainers/runc/libcontainer"
	"golang.org/x/sys/unix"

	"github.com/jailcell/jailcell/isolate/criu"
)

// Checkpoint and restore of a whole sandbox with CRIU, through libcontainer.
// A checkpointed sandbox's processes and memory are gone; its disk (the
// overlay's upper layer) stays, and Disk.Restore brings the processes back on
// it from the image directory.

// prepareImageDir creates dir for criu with the image ownership (criu.ImageDirMode).
func (d *Disk) prepareImageDir(dir string) error {
	if err := os.Mkdir(dir, criu.ImageDirMode); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create image dir: %w", err)
	}
	if err := os.Chown(dir, d.HostID(), 0); err != nil {
		return fmt.Errorf("chown image dir: %w", err)
	}
	if err := os.Chmod(dir, criu.ImageDirMode); err != nil {
		return fmt.Errorf("chmod image dir: %w", err)
	}
	return criu.ChownImages(dir, d.HostID())
}

// Checkpoint dumps every process of the sandbox into imageDir (created if
// missing; it must not be writable by the sandbox). Unless leaveRunning, the
// processes are gone afterwards and the caller destroys the sandbox; its
// disk stays for Restore. The sandbox's connections to the host must be
// closed first: criu refuses sockets whose peer is outside.
func (s *Sandbox) Checkpoint(imageDir string, leaveRunning bool) (retErr error) {
	h := s.disk.h
	if err := h.CriuCheck(); err != nil {
		return err
	}
	// The host's connections to the sandbox's servers: their peers are
	// outside the dumped tree, which criu refuses. A client of a paused
	// sandbox's server sees its connection end, as on E2B's pause.
	s.dial.closeAll(false)
	if s.net != nil {
		// The gateway is the daemon's, outside the sandbox: criu cannot
		// carry its link. The dump is taken with loopback only (closed,
		// never open), and a sandbox that goes on running gets a new
		// gateway with the same allowlist; a restore builds its own.
		if err := s.detachNetwork(); err != nil {
			return err
		}
		defer func() {
			if leaveRunning || retErr != nil {
				if err := s.AttachNetwork(s.policy); err != nil && retErr == nil {
					retErr = err
				}
			}
		}()
	}
	if err := s.disk.prepareImageDir(imageDir); err != nil {
		return err
	}
	// The sandbox's stdout and stderr are the host's log file, which no
	// mount inside shows: criu records it as external, and restore gives
	// the restored tasks the log file the restoring caller passes.
	ext, err := criu.ExternalStdio(s.pid)
	if err != nil {
		return err
	}
	var conf strings.Builder
	conf.WriteString(criu.BaseConfig)
	keys := map[string]bool{}
	for _, k := range ext {
		if !keys[k] {
			fmt.Fprintf(&conf, "external %s\n", k)
			keys[k] = true
		}
	}
	if err := criu.WriteConfig(filepath.Join(imageDir, criu.DumpConf), conf.String()); err != nil {
		return err
	}
	if err := criu.WriteConfig(filepath.Join(imageDir, criu.StdioName), strings.Join(ext[:], "\n")); err != nil {
		return err
	}
	cfg := s.container.Config()
	cfg.Labels = append(criu.WithoutLabel(cfg.Labels, criu.ConfigLabel), criu.ConfigLabel+"="+filepath.Join(imageDir, criu.DumpConf))
	if err := s.container.Set(cfg); err != nil {
		return fmt.Errorf("label sandbox %s for criu: %w", s.ID, err)
	}
	what := "checkpoint of sandbox " + s.ID
	err = criu.Op(what, h.criuBound(s.policy.MemoryBytes), func() error {
		return s.container.Checkpoint(criu.Opts(imageDir, leaveRunning))
	})
	if errors.Is(err, ErrTimeout) {
		return s.afterDumpTimeout(err)
	}
	if err != nil {
		return fmt.Errorf("checkpoint sandbox %s: %w%s", s.ID, err, criu.LogTail(imageDir, "dump.log"))
	}
	// criu dumps as host root, 0600: give the files the image ownership.
	return criu.ChownImages(imageDir, s.disk.HostID())
}

// Restore brings back on d the sandbox checkpointed into imageDir, on d's
// disk or on another one with a copy of its files (CopyUpper, LoadUpper).
// spec must be the one the sandbox was built with, except for bind sources
// (a fork's control directory is its own). On failure everything done is undone; the
// disk and the images stay.
func (d *Disk) Restore(imageDir string, spec Spec) (*Sandbox, error) {
	return d.restore(imageDir, spec, true)
}

// RestoreIfIdle is Restore, unless another checkpoint or restore of this
// process is running (they run one at a time): then it answers ErrBusy at
// at once (having built nothing, or undone what it built) instead of
// queueing behind it. For callers
// with another way to start a kernel (session templates import instead).
func (d *Disk) RestoreIfIdle(imageDir string, spec Spec) (*Sandbox, error) {
	if !criu.SlotIdle() { // a cheap look before building; criu.OpWait takes it for real
		return nil, ErrBusy
	}
	return d.restore(imageDir, spec, false)
}

func (d *Disk) restore(imageDir string, spec Spec, wait bool) (*Sandbox, error) {
	if err := d.h.CriuCheck(); err != nil {
		return nil, err
	}
	if err := spec.Policy.Validate(); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(imageDir, "inventory.img")); err != nil {
		return nil, fmt.Errorf("%w: no checkpoint in %s", ErrNotFound, imageDir)
	}
	// A checkpoint taken on another disk (a fork, a disk rebuilt after a
	// reboot) comes back in this disk's uid slot.
	if err := criu.MoveUserns(imageDir, d.HostID(), idsPerSlot); err != nil {
		return nil, err
	}
	if err := d.prepareImageDir(imageDir); err != nil {
		return nil, err
	}
	// The external stdio of the dump becomes the caller's spec.Log, which
	// libcontainer hands criu as its fds 1 and 2.
	var conf strings.Builder
	conf.WriteString(criu.BaseConfig)
	if b, err := readProc(filepath.Join(imageDir, criu.StdioName)); err == nil { // bounded: it comes with the images
		seen := map[string]bool{}
		for i, k := range strings.Split(string(b), "\n") {
			// Only the keys ExternalStdio writes: the file comes with the
			// images (a store's, a fork's), and criu reads its config
			// line by line as options, so a line with spaces or more
			// lines would hand criu, running as root, options of the
			// image's choosing (--action-script: a command run on the
			// host).
			if k != "" && !criu.StdioKey(k) {
				return nil, fmt.Errorf("%w: the checkpoint's stdio names %q, not a file key of criu's (file[MNT:INODE])", ErrPosture, k)
			}
			if k != "" && !seen[k] && i < 2 {
				fmt.Fprintf(&conf, "inherit-fd fd[%d]:%s\n", i+1, k)
				seen[k] = true
			}
		}
	}
	confPath := filepath.Join(imageDir, criu.RestoreConf)
	if err := criu.WriteConfig(confPath, conf.String()); err != nil {
		return nil, err
	}
	return d.build(spec, []string{criu.ConfigLabel + "=" + confPath}, true, func(c *libcontainer.Container, p *libcontainer.Process, id string) (*libcontainer.Container, *os.Process, error) {
		err := criu.OpWait("restore of sandbox "+id, d.h.criuBound(spec.Policy.MemoryBytes), wait, func() error {
			return c.Restore(p, criu.Opts(imageDir, false))
		})
		if err != nil {
			criu.ReapZombies()
			return nil, nil, fmt.Errorf("restore sandbox %s: %w%s", id, err, criu.LogTail(imageDir, "restore.log"))
		}
		// A restored container stays in libcontainer's "restored" state,
		// which refuses a pause (a fork's freeze); loaded again from its
		// state it is an ordinary running container.
		lc, err := libcontainer.Load(d.h.containersDir(), id)
		if err != nil {
			return nil, nil, fmt.Errorf("reload restored sandbox %s: %w", id, err)
		}
		return lc, nil, nil
	})
}

// LinkImages makes dst (new) a restorable copy of the checkpoint in src:
// memory pages (pages-*.img, nearly all of it) hard-linked as shared images,
// the rest copied (a restore rewrites some: the user namespace's ids).
// src's pages files become shared images (root's, 0644). It returns the
// bytes its copies allocate (CopyFileData, holes kept).
func LinkImages(src, dst string) (int64, error) {
	if err := os.Mkdir(dst, 0o700); err != nil {
		return 0, err
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		return 0, err
	}
	var copied int64
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		from, to := filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())
		if strings.HasPrefix(e.Name(), "pages-") && strings.HasSuffix(e.Name(), ".img") {
			if err := os.Chown(from, 0, 0); err != nil {
				return copied, err
			}
			if err := os.Chmod(from, criu.SharedImageMode); err != nil {
				return copied, err
			}
			if err := os.Link(from, to); err != nil {
				return copied, err
			}
			continue
		}
		n, err := copyImage(from, to)
		copied += n
		if err != nil {
			return copied, err
		}
	}
	return copied, nil
}

func copyImage(from, to string) (int64, error) {
	in, err := os.OpenFile(from, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return 0, err
	}
	used := &ByteCap{Max: math.MaxInt64}
	err = CopyFileData(out, in, used)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return used.Used, err
}
