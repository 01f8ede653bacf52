package zygote

/*
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// The id mapper of a zygote's forks (MapIDs) must write their
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
	"strconv"
	"strings"
	"time"

	"github.com/jailcell/jailcell/isolate/internal/helper"
)

// MapperArg makes the binary a zygote's id mapper: in the user
// namespace its second argument names (joined before Go starts, above), it
// reads lines "PID ID" from stdin and writes "0 ID 65536" as the uid and
// gid map of PID, answering "ok" or "error MESSAGE" for each.
const MapperArg = "__jailcell-internal-zygote-mapper"

// MapperMain is the mapper's process: ids is the size of each map (a uid
// slot's span).
func MapperMain(ids int) int {
	out := bufio.NewWriter(os.Stdout)
	return helper.ServeLines(os.Stdin, out, func(f []string, w io.Writer) int {
		var err error
		pid, perr := 0, error(nil)
		id := 0
		if len(f) != 2 {
			err = fmt.Errorf("want PID ID, got %q", strings.Join(f, " "))
		} else if pid, perr = strconv.Atoi(f[0]); perr != nil || pid <= 0 {
			err = fmt.Errorf("pid %q", f[0])
		} else if id, perr = strconv.Atoi(f[1]); perr != nil || id < 0 {
			err = fmt.Errorf("id %q", f[1])
		}
		if err == nil {
			m := []byte(fmt.Sprintf("0 %d %d\n", id, ids))
			for _, name := range []string{"uid_map", "gid_map"} {
				if err = os.WriteFile(fmt.Sprintf("/proc/%d/%s", pid, name), m, 0); err != nil {
					break
				}
			}
		}
		if err != nil {
			fmt.Fprintf(w, "error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		} else {
			fmt.Fprintln(w, "ok")
		}
		return 0
	})
}

// StartMapper starts the id mapper in the user namespace of pid. It is
// not restarted: a mapper that failed leaves its zygote unusable (the
// next create takes another path).
func StartMapper(pid int) (*helper.LineHelper, error) {
	m := &helper.LineHelper{Name: "zygote's id mapper", Args: []string{MapperArg, fmt.Sprintf("/proc/%d/ns/user", pid)}}
	return m, m.Start()
}

// MapIDs gives pid's user namespace the uid and gid map 0 -> id (id
// relative to the zygote's namespace) through mapper m, waiting at most
// timeout.
func MapIDs(m *helper.LineHelper, pid, id int, timeout time.Duration) error {
	lines, err := m.Ask(fmt.Sprintf("%d %d", pid, id), 1, timeout)
	if err != nil {
		return err
	}
	if len(lines) != 1 || lines[0] != "ok" {
		return fmt.Errorf("id mapper: %s", Truncate([]byte(strings.Join(lines, " ")), 300))
	}
	return nil
}
