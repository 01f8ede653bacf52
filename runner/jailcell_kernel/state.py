"""State the kernel's modules share: the flags its signal handler reads,
the running kernel and shell, and the kernel's own log."""

import os


class _State:
    # True only while a cell runs. The host sends SIGINT on a timeout; if it
    # lands after the cell finished it must not kill an idle kernel.
    executing = False
    # Set when a SIGINT was turned into KeyboardInterrupt during this cell.
    interrupted = False
    # Read end of a pipe whose only writer is the init: it reports EOF when
    # the init is gone.
    init_pipe = None
    # The sandbox's original stderr (the host's kernel log), kept for the
    # kernel's own troubles once fd 2 belongs to the cells.
    log_fd = 2
    # True while the IPython shell is being built: its own imports must not
    # start another.
    shell_loading = False
    # True while the main thread writes a display frame: a KeyboardInterrupt
    # raised inside sendall would tear the frame and lose the connection, so
    # a SIGINT then is only noted, and raised once the frame is whole.
    deferring = False
    deferred_sigint = False
    # How many times the SIGINT handler ran: the pump, which sees each
    # SIGINT arrive through the wakeup fd, wakes the main thread until this
    # moves (see _Pump.run: a SIGINT can arrive and stay unhandled).
    sigint_runs = 0
    # True while the main thread waits for a command (its SIGINT goes to
    # the command's group): the pump wakes that wait as it does a cell.
    command_wait = False
    # Counts the cells and command waits begun: the pump's kicks for a
    # SIGINT belong to the one in flight when it was read, never to a
    # later one (a cell that set KICK_SIGNAL to its default was ended by a
    # kick left over from the interrupt of the cell before).
    runs_begun = 0
    # True once prepare() has run (in this process or in the zygote it was
    # forked from): the import hooks are in, the preload imported.
    prepared = False
    # The running _Kernel, for display() and pyplot.show().
    kernel = None
    # IPython's InteractiveShell, once a cell needed it (see shell.py).
    shell = None
    # shell.py's _ensure_shell, set when that module is imported: display and
    # jupyter need the shell, and the shell needs them, so they reach it
    # through here instead of importing it (no import cycle).
    shell_loader = None


def _ensure_shell():
    """The shell, built on first use (None without IPython, or before the
    shell module is loaded)."""
    load = _State.shell_loader
    return load() if load is not None else _State.shell


def _on_sigint(signum, frame):
    _State.sigint_runs += 1
    if _State.executing:
        if _State.deferring:
            _State.deferred_sigint = True
            return
        _State.interrupted = True
        raise KeyboardInterrupt


def _log(text):
    """Report a kernel fault to the host's log, never to a cell's output."""
    try:
        os.write(_State.log_fd, ("jailcell kernel: %s\n" % text.rstrip()).encode("utf-8", "replace"))
    except OSError:
        pass
