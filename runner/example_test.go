package runner_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jailcell/jailcell/runner"
)

// The host side of one session: write the kernel into the control directory,
// listen, start the sandbox with runner.Argv as its command, then run cells.
func Example() {
	ctl := "/var/lib/jailcell/sessions/s1/ctl" // bind-mounted read-only at /run/jailcell
	if err := runner.WriteKernel(ctl); err != nil {
		log.Fatal(err)
	}
	l, err := runner.Listen(ctl)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()

	argv := runner.Argv("/run/jailcell", []string{"numpy", "pandas", "matplotlib.pyplot"})
	_ = argv // start the sandbox with argv as its PID 1 here

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := runner.Accept(ctx, l, runner.DefaultMaxFrame, runner.AnyUID)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	res, err := conn.Exec(runner.ExecRequest{ID: "c1", Code: "x = 21\nx * 2", MaxOutput: 1 << 20},
		func(name, text string) { fmt.Printf("[%s] %s", name, text) })
	if err != nil {
		log.Fatal(err) // the connection is broken: Accept the kernel's reconnect, or kill the sandbox
	}
	fmt.Println(res.Status, res.Value["text/plain"])
}
