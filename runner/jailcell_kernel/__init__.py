"""jailcell kernel: runs notebook-style Python cells for the host, inside a sandbox.

Started as PID 1 of the sandbox's pid namespace, from the control directory
(see runner.Argv in runner/runner.go for why it is started this way):

    python3 -s -c 'import sys; ...; from jailcell_kernel.start import main; ...' \
        /run/jailcell --connect /run/jailcell/host.sock \
        [--preload numpy,pandas,matplotlib.pyplot]

The host listens and this kernel connects, retrying every 50 ms forever, so a
restarted host daemon can re-adopt a live kernel with its variables intact.
After every (re)connect it sends a hello frame, then runs exec requests one at
a time in one persistent namespace, streaming what the cell writes to fds 1
and 2 and ending each cell with a result frame.

Framing, both directions: a 4-byte big-endian length N, then N bytes of a
UTF-8 JSON object whose "t" key names its type.

The user's code runs in this very process and can rewrite anything here, so
this package is not a security boundary (the sandbox is) and the host treats
every frame it sends as untrusted. This package only has to be robust against
honest code that misbehaves: floods, hangs, exceptions, stray signals.

stdlib only, and cheap to start: the host waits for hello before the first
cell, so nothing heavy is imported unless it was asked for with --preload.

Modules, each readable alone (importing any of them only defines things;
start.main does the work):

    start     PID 1: fork, stay behind as a bare init; the kernel's main()
    state     flags shared across modules, the running kernel, the kernel log
    frames    the wire encoding: frame header, JSON, sizes
    link      the connection to the host: connect, hello, read and dispatch
    seed      reseeding what was seeded at import (after a restore or fork)
    capture   fds 1 and 2 as pipes, drained into stream frames
    display   rich output: MIME bundles, text/plain as Jupyter shows it
    charts    the numbers a matplotlib figure drew; pyplot.show()
    hooks     patching a module the moment it is imported
    shell     notebook semantics: IPython's magics, shell escapes, get_ipython()
    jupyter   what libraries, the pager, input() and pdb see under ipykernel
    errors    a cell's exception as the result's error, kernel frames left out
    kernel    the kernel: one namespace, the serve loop, running a cell
    assist    complete, inspect and is_complete
    commands  commands and environment
"""
