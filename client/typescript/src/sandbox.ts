/**
 * Sandbox: one jailcell session, with the surface of E2B's code-interpreter
 * JS SDK (Sandbox.create, runCode, files, kill), over any transport.
 */

import { InternalError, NotFoundError, badRequest } from "./errors.js";
import { EntryInfo, Execution, ExecutionError, OutputMessage, Result, WriteInfo } from "./models.js";
import { type CallOptions, type Fields, type Transport, type TransportChoice, transportFor } from "./transport.js";
import type { CreateFields, Envs, Limits, SessionInfo, WireEvent, WireResponse } from "./wire.js";

/** What files.write and runCode's files take; strings are written as UTF-8. */
export type Data = string | Uint8Array | ArrayBuffer | Blob;

export type OutputHandler = (msg: OutputMessage) => unknown;
export type ResultHandler = (result: Result) => unknown;
export type ErrorHandler = (error: ExecutionError) => unknown;
/** IPython's clear_output(wait): clear what was shown now, or (wait) when the next output comes. */
export type ClearOutputHandler = (wait: boolean) => unknown;

async function bytes(data: Data, what: string): Promise<Uint8Array> {
  if (typeof data === "string") {
    return new Uint8Array(Buffer.from(data, "utf8"));
  }
  if (data instanceof Uint8Array) {
    return data;
  }
  if (data instanceof ArrayBuffer) {
    return new Uint8Array(data);
  }
  if (typeof Blob !== "undefined" && data instanceof Blob) {
    return new Uint8Array(await data.arrayBuffer());
  }
  throw badRequest(`${what} must be a string, Uint8Array, ArrayBuffer or Blob`);
}

/** envs checked client-side for its shape; the service checks names and sizes. */
function envsField(envs: unknown, what: string): Envs {
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

function seconds(ms: number | undefined, what: string): number | undefined {
  if (ms === undefined) {
    return undefined;
  }
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0) {
    throw badRequest(`${what} = ${String(ms)}: must be a number of milliseconds >= 0 (0 or absent: the default)`);
  }
  return ms / 1000;
}

export interface RunCodeOpts {
  /** Output as it is printed, chunk by chunk. */
  onStdout?: OutputHandler;
  onStderr?: OutputHandler;
  /** Each figure or display() as it is shown, and the last expression's value last. */
  onResult?: ResultHandler;
  /** The cell's exception, once it ended with one. */
  onError?: ErrorHandler;
  /**
   * The cell called IPython's clear_output(wait) (a progress bar redrawing
   * itself): a front end clears what it showed. Without this callback the
   * event is ignored: logs and results keep everything, as the service's
   * result does (it has no record of the clear).
   */
  onClearOutput?: ClearOutputHandler;
  /** Keep the cell's text as written: ANSI escapes and "\r\n" (default: stripped, "\n"). */
  rawAnsi?: boolean;
  /** Environment variables for this cell only, put back after it. */
  envs?: Envs;
  /** The cell's time limit (default: the policy's; clamped to its ceiling). A cell over it ends with status "timeout", its state kept. */
  timeoutMs?: number;
  /** Bound on the call itself (default: the transport's, or timeoutMs + 60 s if more). */
  requestTimeoutMs?: number;
  /**
   * Aborts the call. Over HTTP the connection closes and the service
   * interrupts the cell, its variables kept; over
   * `jailcell json` the cell runs on: interrupt() or kill() stops it.
   */
  signal?: AbortSignal;
  /** Only "python" (E2B's option; jailcell runs Python). */
  language?: string;
  /** Files placed in the working directory before the cell runs: {path: data}. */
  files?: Record<string, Data>;
  /** Run up to this many times, asking the configured fixer for new code after an error (docs/workflow.md). */
  fixAttempts?: number;
  /** Run even if failure memory would skip the cell. */
  force?: boolean;
  /** Save the session first: the target of rollback(). */
  snapshot?: boolean;
}

/** Turns an exec's streamed events into callbacks and logs. */
class Collector {
  readonly stdout: string[] = [];
  readonly stderr: string[] = [];
  private readonly shown: Result[] = [];
  constructor(private readonly o: RunCodeOpts) {}

  readonly event = async (ev: WireEvent): Promise<void> => {
    if (ev.event === "stdout" || ev.event === "stderr") {
      if (typeof ev.text !== "string") {
        return;
      }
      const err = ev.event === "stderr";
      (err ? this.stderr : this.stdout).push(ev.text);
      const cb = err ? this.o.onStderr : this.o.onStdout;
      await cb?.(new OutputMessage(ev.text, Date.now() * 1e6, err));
    } else if (ev.event === "display" && ev.display !== null && typeof ev.display === "object") {
      const r = Result.fromDisplay(ev.display);
      this.shown.push(r);
      await this.o.onResult?.(r);
    } else if (ev.event === "clear_output") {
      await this.o.onClearOutput?.(ev.wait === true);
    }
    // Kinds a newer server sends are skipped.
  };

  async finish(resp: WireResponse): Promise<Execution> {
    const ex = Execution.fromResponse(resp, this.stdout, this.stderr);
    if (this.shown.length > 0 && !ex.results.some((r) => !r.isMainResult)) {
      ex.results.unshift(...this.shown); // the figures came only as events
    }
    if (this.o.onResult) {
      for (const r of ex.results) {
        if (r.isMainResult || this.shown.length === 0) {
          await this.o.onResult(r);
        }
      }
    }
    if (ex.error && this.o.onError) {
      await this.o.onError(ex.error);
    }
    return ex;
  }
}

async function execFields(code: string, session: string | undefined, o: RunCodeOpts, policy?: string): Promise<Fields> {
  if (typeof code !== "string" || code === "") {
    throw badRequest("code must be a non-empty string of Python source");
  }
  if (o.language !== undefined && o.language !== "python") {
    throw badRequest(`language = ${JSON.stringify(o.language)}: jailcell runs Python; allowed "python"`);
  }
  const f: Fields = { code, session, timeout_s: seconds(o.timeoutMs, "timeoutMs"), policy };
  if (o.files) {
    const files: { path: string; data: Uint8Array }[] = [];
    for (const [path, data] of Object.entries(o.files)) {
      files.push({ path, data: await bytes(data, `files[${JSON.stringify(path)}]`) });
    }
    f["files"] = files;
  }
  if (o.fixAttempts !== undefined) {
    if (!Number.isInteger(o.fixAttempts) || o.fixAttempts < 1) {
      throw badRequest(`fixAttempts = ${String(o.fixAttempts)}: must be an integer >= 1 (every run counts, the first included)`);
    }
    f["fix"] = { max_attempts: o.fixAttempts };
  }
  if (o.force) f["force"] = true;
  if (o.snapshot) f["snapshot"] = true;
  if (o.rawAnsi) f["raw_ansi"] = true;
  if (o.envs !== undefined) f["envs"] = envsField(o.envs, "envs");
  return f;
}

function callOpts(o: RunCodeOpts, c: Collector): CallOptions {
  const co: CallOptions = { onEvent: c.event };
  if (o.requestTimeoutMs !== undefined) {
    co.timeoutMs = o.requestTimeoutMs;
  } else if (o.timeoutMs !== undefined) {
    co.timeoutMs = Math.max(o.timeoutMs + 60_000, 900_000);
  }
  if (o.signal) co.signal = o.signal;
  return co;
}

/** The session's working directory (/work): sandbox.files. */
export class Files {
  constructor(private readonly sbx: Sandbox) {}

  /** Write data (a string as UTF-8, or bytes) to path, relative to the working directory; parent directories are made. */
  async write(path: string, data: Data): Promise<WriteInfo>;
  /** Write several files, one after another. */
  async write(files: { path: string; data: Data }[]): Promise<WriteInfo[]>;
  async write(pathOrFiles: string | { path: string; data: Data }[], data?: Data): Promise<WriteInfo | WriteInfo[]> {
    if (Array.isArray(pathOrFiles)) {
      const out: WriteInfo[] = [];
      for (const f of pathOrFiles) {
        out.push(await this.write(f.path, f.data));
      }
      return out;
    }
    const path = pathOrFiles;
    if (data === undefined) {
      throw badRequest("files.write needs data: a string, Uint8Array, ArrayBuffer or Blob");
    }
    const resp = await this.sbx.call("upload", { path, data: await bytes(data, "data") });
    return { name: path.split("/").pop() ?? path, path, type: "file", size: typeof resp.size === "number" ? resp.size : 0 };
  }

  /** The file's content: format "text" (UTF-8, the default), "bytes" or "blob". */
  async read(path: string, opts?: { format?: "text" }): Promise<string>;
  async read(path: string, opts: { format: "bytes" }): Promise<Uint8Array>;
  async read(path: string, opts: { format: "blob" }): Promise<Blob>;
  async read(path: string, opts: { format?: "text" | "bytes" | "blob" } = {}): Promise<string | Uint8Array | Blob> {
    const format = opts.format ?? "text";
    if (format !== "text" && format !== "bytes" && format !== "blob") {
      throw badRequest(`format = ${JSON.stringify(format)}: allowed "text", "bytes" or "blob"`);
    }
    const got = (await this.sbx.call("download", { path })).data;
    const data = got instanceof Uint8Array ? got : new Uint8Array();
    if (format === "bytes") return data;
    if (format === "blob") return new Blob([data]);
    return Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString("utf8");
  }

  /** The files and directories under path ("" or "." for all), path itself included. */
  async list(path = ""): Promise<EntryInfo[]> {
    let prefix = path.replace(/^\/+|\/+$/g, "");
    if (prefix === ".") prefix = "";
    const out: EntryInfo[] = [];
    for (const e of (await this.sbx.call("files", {})).files ?? []) {
      const p = typeof e.path === "string" ? e.path : "";
      if (prefix !== "" && p !== prefix && !p.startsWith(prefix + "/")) {
        continue;
      }
      const t = typeof e.mtime === "string" ? new Date(e.mtime) : undefined;
      out.push({
        name: p.split("/").pop() ?? p,
        path: p,
        type: e.dir === true ? "dir" : "file",
        size: typeof e.size === "number" ? e.size : 0,
        modifiedTime: t && !Number.isNaN(t.getTime()) ? t : undefined,
      });
    }
    return out;
  }

  /** Whether path exists (a file). */
  async exists(path: string): Promise<boolean> {
    try {
      await this.sbx.call("download", { path });
      return true;
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
  }
}

export interface SandboxOpts extends TransportChoice {
  /** A transport shared with other sandboxes (not closed by kill). */
  transport?: Transport;
  /** Idle timeout: the session ends after this long without a call (default: the service's). */
  ttlMs?: number;
  /** Ends the session this long after its creation however busy (default and ceiling: the service's max_lifetime). */
  maxLifetimeMs?: number;
  /** A configured policy's name. */
  policy?: string;
  /** Tighten the policy: {memory_bytes: ..., timeout_s: ...}; an unknown key is refused. */
  limits?: Limits;
  /** A store entry the workspace is synced to. */
  persist?: string;
  /** pip requirements installed from the service's wheelhouse. */
  requirements?: string[];
  /** Environment variables of every cell and command in the sandbox. */
  envs?: Envs;
}

function createFields(o: SandboxOpts): CreateFields {
  const f: CreateFields = {};
  const ttl = seconds(o.ttlMs, "ttlMs");
  const life = seconds(o.maxLifetimeMs, "maxLifetimeMs");
  if (ttl !== undefined) f.ttl_s = ttl;
  if (life !== undefined) f.max_lifetime_s = life;
  if (o.policy !== undefined) f.policy = o.policy;
  if (o.limits !== undefined) f.limits = o.limits;
  if (o.persist !== undefined) f.persist = o.persist;
  if (o.requirements !== undefined) f.requirements = o.requirements;
  if (o.envs !== undefined) f.envs = envsField(o.envs, "envs");
  return f;
}

function ownTransport(o: SandboxOpts): { transport: Transport; owned: boolean } {
  if (o.transport !== undefined) {
    if (o.socket !== undefined || o.url !== undefined || o.command !== undefined) {
      throw badRequest("give transport, or socket, url or command; not both");
    }
    return { transport: o.transport, owned: false };
  }
  return { transport: transportFor(o), owned: true };
}

/**
 * A jailcell session: a stateful Python kernel in its own sandbox.
 *
 *     await using sbx = await Sandbox.create();   // $JAILCELL_SOCKET or /run/jailcell/jailcell.sock
 *     await sbx.runCode("x = 41");
 *     console.log((await sbx.runCode("x + 1")).text); // 42
 */
export class Sandbox {
  /** The session as last reported (create, hibernate, restore, snapshot, rollback). */
  info: SessionInfo;
  readonly files: Files;
  private closed = false;

  private constructor(
    readonly transport: Transport,
    private readonly ownsTransport: boolean,
    info: SessionInfo,
  ) {
    this.info = info;
    this.files = new Files(this);
  }

  /** A new session; resolves once its kernel is ready. */
  static async create(opts: SandboxOpts = {}): Promise<Sandbox> {
    const fields = createFields(opts);
    const { transport, owned } = ownTransport(opts);
    try {
      const resp = await transport.call("create", fields as Fields);
      return new Sandbox(transport, owned, sessionInfo(resp));
    } catch (e) {
      if (owned) await transport.close();
      throw e;
    }
  }

  /**
   * One cell in a fresh sandbox that ends with it; the files it made come
   * back in Execution.files with their data. policy names a configured policy.
   */
  static async runOnce(code: string, opts: RunCodeOpts & TransportChoice & { transport?: Transport; policy?: string } = {}): Promise<Execution> {
    const fields = await execFields(code, undefined, opts, opts.policy);
    const { transport, owned } = ownTransport(opts);
    try {
      const c = new Collector(opts);
      return await c.finish(await transport.call("exec", fields, callOpts(opts, c)));
    } finally {
      if (owned) await transport.close();
    }
  }

  /** The session's id. */
  get sandboxId(): string {
    return this.info.session;
  }

  get id(): string {
    return this.info.session;
  }

  /** One wire request on this session (the base of every method: a new op is one method over it). */
  call(op: string, fields: Fields, opts?: CallOptions): Promise<WireResponse> {
    return this.transport.call(op, { ...fields, session: this.sandboxId }, opts);
  }

  /**
   * Run a cell in this sandbox's kernel; variables persist between calls.
   * An exception in the cell is Execution.error, not thrown; errors of
   * jailcell itself (busy, not_found, ...) throw a JailcellError.
   */
  async runCode(code: string, opts: RunCodeOpts = {}): Promise<Execution> {
    const c = new Collector(opts);
    const fields = await execFields(code, this.sandboxId, opts);
    return c.finish(await this.transport.call("exec", fields, callOpts(opts, c)));
  }

  /**
   * End the session now (a running cell is killed with it). True if it was
   * live, false if it had already ended (closed or expired).
   */
  async kill(): Promise<boolean> {
    if (this.closed) return false;
    this.closed = true;
    try {
      await this.call("close", {});
      return true;
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    } finally {
      if (this.ownsTransport) await this.transport.close();
    }
  }

  /** The same as kill. */
  close(): Promise<boolean> {
    return this.kill();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.kill();
  }

  /** Whether the session is still live. */
  async isRunning(): Promise<boolean> {
    if (this.closed) return false;
    const resp = await this.transport.call("sessions", {});
    return (resp.sessions ?? []).some((s) => s.session === this.sandboxId);
  }

  /**
   * Send the running cell a KeyboardInterrupt, as Jupyter's interrupt: its
   * runCode resolves with error KeyboardInterrupt and the kernel's
   * variables kept. True if a cell was running. Best effort, as
   * Jupyter's: a cell caught before its code started runs on.
   */
  async interrupt(): Promise<boolean> {
    return (await this.call("interrupt", {})).interrupted === true;
  }

  /** Save the kernel and files as the rollback target. */
  async snapshot(): Promise<SessionInfo> {
    return (this.info = sessionInfo(await this.call("snapshot", {})));
  }

  /** Return to the snapshot, in place. */
  async rollback(): Promise<SessionInfo> {
    return (this.info = sessionInfo(await this.call("rollback", {})));
  }

  /** Checkpoint the session to disk and release its memory; the next runCode or restore brings it back. */
  async hibernate(): Promise<SessionInfo> {
    return (this.info = sessionInfo(await this.call("hibernate", {})));
  }

  /** Bring a hibernated session back now. */
  async restore(): Promise<SessionInfo> {
    return (this.info = sessionInfo(await this.call("restore", {})));
  }

  /** The same as restore. */
  resume(): Promise<SessionInfo> {
    return this.restore();
  }

  /** A new sandbox that starts as an exact copy of this one (kernel and workspace), on the same transport. */
  async fork(): Promise<Sandbox> {
    return new Sandbox(this.transport, false, sessionInfo(await this.call("fork", {})));
  }

  toString(): string {
    return `Sandbox(${this.sandboxId} via ${this.transport.description})`;
  }
}

function sessionInfo(resp: WireResponse): SessionInfo {
  const { id: _id, ok: _ok, ...info } = resp;
  if (typeof info.session !== "string" || info.session === "") {
    throw new InternalError(0, "internal", `the response names no session: ${JSON.stringify(resp).slice(0, 200)}`);
  }
  return info as unknown as SessionInfo;
}
