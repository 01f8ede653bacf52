package isolate

/*
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// The id mapper of a zygote's forks (Zygote.mapIDs) must write their
// uid_map and gid_map from the zygote's user namespace, their parent:
// the kernel takes a map only from the namespace itself or its parent.
// A Go program cannot join a user namespace once its runtime has started
// threads, so this runs first, before the runtime, as libcontainer's
// nsexec does: with argv[1] the mapper's word and argv[2] a user
// namespace's path, the process joins it (as host root, with every
// capability there) and goes on into Go.
__attribute__((constructor)) static void jailcell_mapper_setns(int argc, char **argv) {
	if (argc < 3 || strcmp(argv[1], "__jailcell-internal-zygote-mapper") != 0)
		return;
	int fd = open(argv[2], O_RDONLY | O_CLOEXEC);
	if (fd < 0 || setns(fd, CLONE_NEWUSER) != 0) {
		perror("jailcell zygote mapper: join the zygote's user namespace");
		_exit(3);
	}
	close(fd);
}
*/
import "C"

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// zygoteMapperArg makes the binary a zygote's id mapper: in the user
// namespace its second argument names (joined before Go starts, above), it
// reads lines "PID ID" from stdin and writes "0 ID 65536" as the uid and
// gid map of PID, answering "ok" or "error MESSAGE" for each.
const zygoteMapperArg = "__jailcell-internal-zygote-mapper"

func zygoteMapperMain() int {
	in := bufio.NewScanner(io.LimitReader(os.Stdin, 1<<30))
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		f := strings.Fields(in.Text())
		var err error
		pid, perr := 0, error(nil)
		id := 0
		if len(f) != 2 {
			err = fmt.Errorf("want PID ID, got %q", in.Text())
		} else if pid, perr = strconv.Atoi(f[0]); perr != nil || pid <= 0 {
			err = fmt.Errorf("pid %q", f[0])
		} else if id, perr = strconv.Atoi(f[1]); perr != nil || id < 0 {
			err = fmt.Errorf("id %q", f[1])
		}
		if err == nil {
			m := []byte(fmt.Sprintf("0 %d %d\n", id, idsPerSlot))
			for _, name := range []string{"uid_map", "gid_map"} {
				if err = os.WriteFile(fmt.Sprintf("/proc/%d/%s", pid, name), m, 0); err != nil {
					break
				}
			}
		}
		if err != nil {
			fmt.Fprintf(out, "error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		} else {
			fmt.Fprintln(out, "ok")
		}
		if out.Flush() != nil {
			return 1
		}
	}
	return 0
}

// mapper is a running id mapper.
type mapper struct {
	mu  sync.Mutex
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

// startMapper starts the id mapper in the user namespace of pid.
func startMapper(pid int) (*mapper, error) {
	c := exec.Command("/proc/self/exe", zygoteMapperArg, fmt.Sprintf("/proc/%d/ns/user", pid))
	c.Args[0] = "jailcell-zygote-mapper"
	c.Env = []string{}
	stderr := &boundedBuffer{max: 4096}
	c.Stderr = stderr
	in, err := c.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := c.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("start the zygote's id mapper: %w", err)
	}
	return &mapper{cmd: c, in: in, out: bufio.NewReaderSize(io.LimitReader(out, 1<<30), 512)}, nil
}

// mapIDs gives pid's user namespace the uid and gid map 0 -> id (id
// relative to the zygote's namespace), waiting at most timeout.
func (m *mapper) mapIDs(pid, id int, timeout time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, err := fmt.Fprintf(m.in, "%d %d\n", pid, id); err != nil {
		return fmt.Errorf("id mapper: %w", err)
	}
	type answer struct {
		line string
		err  error
	}
	ch := make(chan answer, 1)
	go func() {
		l, err := m.out.ReadString('\n')
		ch <- answer{l, err}
	}()
	select {
	case a := <-ch:
		if a.err != nil {
			return fmt.Errorf("id mapper: %w", a.err)
		}
		if l := strings.TrimSpace(a.line); l != "ok" {
			return fmt.Errorf("id mapper: %s", truncate([]byte(l), 300))
		}
		return nil
	case <-time.After(timeout):
		_ = m.cmd.Process.Kill()
		return fmt.Errorf("id mapper: no answer in %s", timeout)
	}
}

func (m *mapper) close() {
	_ = m.in.Close()
	done := make(chan struct{})
	go func() { _ = m.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = m.cmd.Process.Kill()
		<-done
	}
}
