package isolate

import (
	"os"

	"github.com/jailcell/jailcell/isolate/seccomp"
	"github.com/jailcell/jailcell/isolate/zygote"
)

// helperMain runs the helper named by os.Args[1], if any, and exits.
func helperMain() {
	if len(os.Args) < 2 {
		return
	}
	switch os.Args[1] {
	case seccomp.ReadArg:
		os.Exit(seccomp.ReadFiltersMain(os.Args[2:]))
	case seccomp.DumpArg:
		os.Exit(seccomp.DumpFilterMain(os.Args[2:]))
	case zygote.MapperArg:
		os.Exit(zygote.MapperMain(idsPerSlot))
	case seccomp.LoadArg:
		os.Exit(seccomp.LoadFilterMain())
	}
}
