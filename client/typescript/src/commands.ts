/**
 * sandbox.commands and sandbox.pty: shell commands run inside the
 * session's sandbox (bash -c, a child of its kernel, its own process group,
 * cwd under /work), with the names of E2B's JS SDK: commands.run,
 * sendStdin, closeStdin, CommandResult, CommandHandle, CommandExitError,
 * pty.create, sendInput, resize. Each call is one `command` op
 * (docs/service.md, "Commands, environment, watches"). What a command
 * prints and its exit code come from inside the sandbox: as untrusted as a
 * cell's output.
 */

import { JailcellError, NotFoundError, badRequest } from "./errors.js";
import { type CallOptions, type Fields, type Transport, boundFor } from "./transport.js";
import type { CommandFields, Envs, WireCommandResult, WireEvent, WirePtySize, WireResponse } from "./wire.js";

/** What Commands needs from its sandbox: one call on its session. */
export interface CommandCaller {
  call(op: string, fields: Fields, opts?: CallOptions): Promise<WireResponse>;
  /** Whose own bound a long command's call may exceed, never undercut. */
  readonly transport?: Pick<Transport, "requestTimeoutMs">;
}

/** E2B's default limit on a command: 60 s. */
export const DEFAULT_COMMAND_TIMEOUT_MS = 60_000;

/** A chunk of a command's output, as it is written. */
export type CommandOutputHandler = (data: string) => unknown;

export interface CommandStartOpts {
  /** Start it and return a CommandHandle at once (wait() for its result). */
  background?: boolean;
  /** Working directory, under /work (default /work). */
  cwd?: string;
  /** Accepted for E2B's signature: commands run as the sandbox's root (mapped to an unprivileged uid on the host), like the cells. */
  user?: string;
  /** Environment variables of this command only (the sandbox's own, from create, are there too). */
  envs?: Envs;
  onStdout?: CommandOutputHandler;
  onStderr?: CommandOutputHandler;
  /**
   * The command's limit (default 60 s, as E2B's): past it the host
   * interrupts its process group, then kills it (result.error says so).
   * 0: the policy's cell timeout in the foreground, none in the background.
   */
  timeoutMs?: number;
  /** Bound on the call itself (default: the transport's, or timeoutMs + 60 s if more). */
  requestTimeoutMs?: number;
  /**
   * Keep the command's stdin open for sendStdin and closeStdin (E2B's
   * option); without it stdin is /dev/null. Background only: a foreground
   * command holds the session, so no input could reach it.
   */
  stdin?: boolean;
}

/** Options of a call on a running command (E2B's CommandRequestOpts). */
export interface CommandRequestOpts {
  /** Bound on the call (default: the transport's). */
  requestTimeoutMs?: number;
}

const strictUTF8 = new TextDecoder("utf-8", { fatal: true });

/** data as the wire's text: a string, or bytes that must be UTF-8. */
function stdinText(data: string | Uint8Array): string {
  if (typeof data === "string") return data;
  if (!(data instanceof Uint8Array)) {
    throw badRequest("stdin data must be a string or a Uint8Array");
  }
  try {
    return strictUTF8.decode(data);
  } catch {
    // Replacing the bytes would send the command something it was not given.
    throw badRequest("stdin data is not UTF-8: jailcell carries a command's input as text");
  }
}

/** What a finished command did: E2B's CommandResult, plus jailcell's timedOut and truncation flags. */
export interface CommandResult {
  exitCode: number;
  /** Why it did not exit by itself (timed out, killed by a signal); undefined when it did. */
  error?: string;
  stdout: string;
  stderr: string;
  /** The host's clock passed its timeout: interrupted, then killed. */
  timedOut: boolean;
  /** The stream was cut at the policy's output limit. */
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
}

function commandResult(c: WireCommandResult | undefined): CommandResult {
  const exitCode = Number.isInteger(c?.exit_code) ? (c!.exit_code as number) : 0;
  const timedOut = c?.timed_out === true;
  const r: CommandResult = {
    exitCode,
    stdout: typeof c?.stdout === "string" ? c.stdout : "",
    stderr: typeof c?.stderr === "string" ? c.stderr : "",
    timedOut,
    stdoutTruncated: c?.stdout_truncated === true,
    stderrTruncated: c?.stderr_truncated === true,
  };
  if (timedOut) {
    r.error = "command timed out; it was interrupted, then killed";
  } else if (exitCode < 0) {
    r.error = `command killed by signal ${-exitCode}`;
  }
  return r;
}

/**
 * A command ended with an exit code other than 0 (E2B's
 * CommandExitError): thrown by commands.run and CommandHandle.wait, it
 * carries the result. code "command_exit", status 0.
 */
export class CommandExitError extends JailcellError implements CommandResult {
  constructor(readonly result: CommandResult) {
    super(0, "command_exit", `command ${result.timedOut ? "timed out" : `exited with code ${result.exitCode}`}: ${result.stderr.slice(-500)}`);
  }
  get exitCode(): number {
    return this.result.exitCode;
  }
  get error(): string | undefined {
    return this.result.error;
  }
  get stdout(): string {
    return this.result.stdout;
  }
  get stderr(): string {
    return this.result.stderr;
  }
  get timedOut(): boolean {
    return this.result.timedOut;
  }
  get stdoutTruncated(): boolean {
    return this.result.stdoutTruncated;
  }
  get stderrTruncated(): boolean {
    return this.result.stderrTruncated;
  }
}

function events(onStdout: CommandOutputHandler | undefined, onStderr: CommandOutputHandler | undefined): ((ev: WireEvent) => Promise<void>) | undefined {
  if (onStdout === undefined && onStderr === undefined) {
    return undefined;
  }
  return async (ev) => {
    if (typeof ev.text !== "string") return;
    if (ev.event === "stdout") await onStdout?.(ev.text);
    else if (ev.event === "stderr") await onStderr?.(ev.text);
  };
}

function callOpts(
  sbx: CommandCaller,
  timeoutMs: number | undefined,
  requestTimeoutMs: number | undefined,
  onEvent?: (ev: WireEvent) => Promise<void>,
): CallOptions {
  const co: CallOptions = {};
  if (onEvent) co.onEvent = onEvent;
  if (requestTimeoutMs !== undefined) co.timeoutMs = requestTimeoutMs;
  else if (timeoutMs !== undefined && timeoutMs > 0) co.timeoutMs = boundFor(sbx.transport, timeoutMs);
  return co;
}

/**
 * A command started with background: true (E2B's CommandHandle): wait()
 * for its result, kill() it, sendStdin() and closeStdin() if it was started
 * with stdin: true, resize() its terminal if it has one (sandbox.pty). It
 * runs inside the sandbox between requests (it ends with the session);
 * while wait() waits, the session is busy: a cell, sendStdin or resize
 * meanwhile is refused with BusyError, so send the input, then wait.
 */
export class CommandHandle {
  private result: CommandResult | undefined;
  private streamed = false;

  constructor(
    private readonly sbx: CommandCaller,
    /** The job's name in the sandbox. */
    readonly job: string,
    /** Its process id inside the sandbox. */
    readonly pid: number,
    private onStdout: CommandOutputHandler | undefined,
    private onStderr: CommandOutputHandler | undefined,
    done?: WireCommandResult,
  ) {
    if (done?.done === true) this.result = commandResult(done);
  }

  /** undefined while it runs. */
  get exitCode(): number | undefined {
    return this.result?.exitCode;
  }
  get error(): string | undefined {
    return this.result?.error;
  }
  get stdout(): string {
    return this.result?.stdout ?? "";
  }
  get stderr(): string {
    return this.result?.stderr ?? "";
  }

  private async ask(action: "wait" | "kill", stream: boolean): Promise<WireCommandResult | undefined> {
    const f: CommandFields = { action, job: this.job };
    const onEvent = stream ? events(this.onStdout, this.onStderr) : undefined;
    // A wait lasts as long as the command: no bound but the command's own.
    const co: CallOptions = { timeoutMs: Infinity };
    if (onEvent) co.onEvent = onEvent;
    return (await this.sbx.call("command", f as Fields, co)).command;
  }

  /** input and resize: answered at once, so the transport's bound. */
  private async tell(f: CommandFields, opts: CommandRequestOpts | undefined): Promise<void> {
    await this.sbx.call("command", { ...f, job: this.job } as Fields, callOpts(this.sbx, undefined, opts?.requestTimeoutMs));
  }

  /**
   * Write data to the command's stdin (E2B's sendStdin): a string, or
   * bytes that are UTF-8. BadRequestError if it was started without stdin
   * (or a terminal) or has ended; LimitError past 1 MiB a call, or while
   * it has 1 MiB of input it has not read.
   */
  async sendStdin(data: string | Uint8Array, opts?: CommandRequestOpts): Promise<void> {
    await this.tell({ action: "input", input: stdinText(data) }, opts);
  }

  /** Close the command's stdin, an end of file to it (E2B's closeStdin); a terminal refuses it (send "\x04", Ctrl-D). */
  async closeStdin(opts?: CommandRequestOpts): Promise<void> {
    await this.tell({ action: "input", input: "", eof: true }, opts);
  }

  /** Resize the command's terminal (sandbox.pty): rows and cols each 1 to 1000. */
  async resize(size: { cols: number; rows: number }, opts?: CommandRequestOpts): Promise<void> {
    await this.tell({ action: "resize", pty: ptySize(size) }, opts);
  }

  /**
   * Wait for the command to end; its output not yet delivered reaches
   * onStdout/onStderr. Rejects with CommandExitError if its exit code is
   * not 0.
   */
  async wait(): Promise<CommandResult> {
    while (this.result === undefined) {
      this.streamed = true;
      const c = await this.ask("wait", true);
      if (c?.done === true) this.result = commandResult(c);
    }
    if (!this.streamed) {
      // It ended before anyone listened: its output in one piece.
      this.streamed = true;
      if (this.result.stdout) await this.onStdout?.(this.result.stdout);
      if (this.result.stderr) await this.onStderr?.(this.result.stderr);
    }
    if (this.result.exitCode !== 0) {
      throw new CommandExitError(this.result);
    }
    return this.result;
  }

  /** SIGKILL the command and its children. True if it was running. */
  async kill(): Promise<boolean> {
    if (this.result !== undefined) return false;
    let c: WireCommandResult | undefined;
    try {
      c = await this.ask("kill", false);
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
    if (c?.done === true) this.result = commandResult(c);
    return true;
  }

  /** Stop delivering output to the callbacks; the command runs on (E2B's disconnect). */
  async disconnect(): Promise<void> {
    this.onStdout = this.onStderr = undefined;
  }
}

/** sandbox.commands. */
export class Commands {
  private readonly handles = new Map<number, CommandHandle>();

  constructor(private readonly sbx: CommandCaller) {}

  /**
   * Run cmd (a bash command line). In the foreground, resolve with its
   * CommandResult once it ends, rejecting with CommandExitError for an exit
   * code other than 0; output reaches onStdout/onStderr as it is written.
   * With background: true, resolve with a CommandHandle at once.
   */
  run(cmd: string, opts?: CommandStartOpts & { background?: false }): Promise<CommandResult>;
  run(cmd: string, opts: CommandStartOpts & { background: true }): Promise<CommandHandle>;
  async run(cmd: string, opts: CommandStartOpts = {}): Promise<CommandResult | CommandHandle> {
    if (typeof cmd !== "string" || cmd === "") {
      throw badRequest("cmd must be a non-empty string: a bash command line");
    }
    if (opts.user !== undefined && opts.user !== "root" && opts.user !== "user") {
      throw badRequest(`user = ${JSON.stringify(opts.user)}: commands run as the sandbox's root; allowed "root" or "user" (E2B's names), or none`);
    }
    const timeoutMs = opts.timeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS;
    if (typeof timeoutMs !== "number" || !Number.isFinite(timeoutMs) || timeoutMs < 0) {
      throw badRequest(`timeoutMs = ${String(timeoutMs)}: must be a number of milliseconds >= 0 (0: the policy's cell timeout, none in the background)`);
    }
    const f: CommandFields = { cmd };
    if (opts.envs !== undefined) f.envs = checkEnvs(opts.envs);
    if (opts.cwd !== undefined) f.cwd = opts.cwd;
    if (timeoutMs > 0) f.timeout_s = timeoutMs / 1000;
    if (opts.stdin === true) f.stdin = true;
    if (opts.background === true) {
      return this.start(f, opts);
    }
    const resp = await this.sbx.call("command", f as Fields, callOpts(this.sbx, timeoutMs, opts.requestTimeoutMs, events(opts.onStdout, opts.onStderr)));
    const r = commandResult(resp.command);
    if (r.exitCode !== 0) {
      throw new CommandExitError(r);
    }
    return r;
  }

  /**
   * Start f in the background; its handle is known to kill, connect and
   * sendStdin by pid. sandbox.pty starts its terminals here too.
   * @internal
   */
  async start(f: CommandFields, opts: Pick<CommandStartOpts, "onStdout" | "onStderr" | "requestTimeoutMs">): Promise<CommandHandle> {
    const c = (await this.sbx.call("command", { ...f, background: true } as Fields, callOpts(this.sbx, undefined, opts.requestTimeoutMs))).command;
    const h = new CommandHandle(this.sbx, String(c?.job ?? ""), Number.isInteger(c?.pid) ? (c!.pid as number) : 0, opts.onStdout, opts.onStderr, c);
    this.handles.set(h.pid, h);
    return h;
  }

  /** Kill a background command started through this object, by pid; false if none is known or it had ended. */
  async kill(pid: number): Promise<boolean> {
    const h = this.handles.get(pid);
    return h === undefined ? false : h.kill();
  }

  /** Write to the stdin of a background command started through this object with stdin: true (CommandHandle.sendStdin). */
  async sendStdin(pid: number, data: string | Uint8Array, opts?: CommandRequestOpts): Promise<void> {
    await (await this.connect(pid)).sendStdin(data, opts);
  }

  /** Close the stdin of a background command started through this object (CommandHandle.closeStdin). */
  async closeStdin(pid: number, opts?: CommandRequestOpts): Promise<void> {
    await (await this.connect(pid)).closeStdin(opts);
  }

  /** The handle of a background command started through this object. */
  async connect(pid: number): Promise<CommandHandle> {
    const h = this.handles.get(pid);
    if (h === undefined) {
      throw new NotFoundError(0, "not_found", `no background command with pid ${pid} started through this sandbox`);
    }
    return h;
  }
}

/** envs checked client-side for its shape; the service checks names and sizes. */
export function checkEnvs(envs: unknown, what = "envs"): Envs {
  if (envs === null || typeof envs !== "object" || Array.isArray(envs)) {
    throw badRequest(`${what} must be an object of variable name to string value`);
  }
  for (const [k, v] of Object.entries(envs)) {
    if (typeof v !== "string") {
      throw badRequest(`${what}[${JSON.stringify(k)}] must be a string, got ${typeof v}`);
    }
  }
  return envs as Envs;
}

function ptySize(size: { cols: number; rows: number }): WirePtySize {
  if (size === null || typeof size !== "object" || !Number.isInteger(size.rows) || !Number.isInteger(size.cols)) {
    throw badRequest("size must be { cols, rows }: whole numbers, each 1 to 1000");
  }
  return { rows: size.rows, cols: size.cols };
}

export interface PtyCreateOpts {
  /** The terminal's size: each 1 to 1000. */
  cols: number;
  rows: number;
  /** What the terminal shows, as it is written: UTF-8 bytes (the echo of the input too). */
  onData: (data: Uint8Array) => unknown;
  /** Its limit, as commands.run's (default 60 s; 0: none). */
  timeoutMs?: number;
  /** Accepted for E2B's signature, as commands.run's. */
  user?: string;
  /** Added to the sandbox's environment; TERM is xterm-256color unless given. */
  envs?: Envs;
  /** Working directory, under /work (default /work). */
  cwd?: string;
  requestTimeoutMs?: number;
}

/**
 * sandbox.pty (E2B's): an interactive bash in a new terminal, a background
 * command whose handle is a CommandHandle. Its output reaches onData while
 * the handle's wait() waits; input and resizes are requests of their own,
 * refused with BusyError while a wait() of the sandbox waits.
 */
export class Pty {
  constructor(private readonly commands: Commands) {}

  /** Start bash -i -l in a terminal of opts' size. */
  async create(opts: PtyCreateOpts): Promise<CommandHandle> {
    if (opts === null || typeof opts !== "object" || typeof opts.onData !== "function") {
      throw badRequest("pty.create needs { cols, rows, onData }");
    }
    if (opts.user !== undefined && opts.user !== "root" && opts.user !== "user") {
      throw badRequest(`user = ${JSON.stringify(opts.user)}: commands run as the sandbox's root; allowed "root" or "user" (E2B's names), or none`);
    }
    const timeoutMs = opts.timeoutMs ?? DEFAULT_COMMAND_TIMEOUT_MS;
    if (typeof timeoutMs !== "number" || !Number.isFinite(timeoutMs) || timeoutMs < 0) {
      throw badRequest(`timeoutMs = ${String(timeoutMs)}: must be a number of milliseconds >= 0 (0: none)`);
    }
    const f: CommandFields = { cmd: "bash -i -l", pty: ptySize(opts) };
    if (opts.envs !== undefined) f.envs = checkEnvs(opts.envs);
    if (opts.cwd !== undefined) f.cwd = opts.cwd;
    if (timeoutMs > 0) f.timeout_s = timeoutMs / 1000;
    const enc = new TextEncoder();
    const onData = opts.onData;
    const so: Pick<CommandStartOpts, "onStdout" | "requestTimeoutMs"> = { onStdout: (text) => onData(enc.encode(text)) };
    if (opts.requestTimeoutMs !== undefined) so.requestTimeoutMs = opts.requestTimeoutMs;
    return this.commands.start(f, so);
  }

  /** Type into the terminal: UTF-8 bytes ("\x03" is Ctrl-C, "\x04" Ctrl-D). */
  async sendInput(pid: number, data: Uint8Array, opts?: CommandRequestOpts): Promise<void> {
    await this.commands.sendStdin(pid, data, opts);
  }

  /** Resize the terminal. */
  async resize(pid: number, size: { cols: number; rows: number }, opts?: CommandRequestOpts): Promise<void> {
    await (await this.commands.connect(pid)).resize(size, opts);
  }

  /** SIGKILL the terminal's processes; false if none is known or it had ended. */
  async kill(pid: number): Promise<boolean> {
    return this.commands.kill(pid);
  }
}
