/**
 * Sandbox: one jailcell session, with the surface of E2B's code-interpreter
 * JS SDK (Sandbox.create, runCode, files, kill), over any transport.
 */

import { Commands, Pty, checkEnvs } from "./commands.js";
import { InternalError, NotFoundError, UnavailableError, badRequest } from "./errors.js";
import { EntryInfo, Execution, ExecutionError, OutputMessage, Result, WriteInfo } from "./models.js";
import { type CallOptions, type Fields, type Transport, type TransportChoice, boundFor, transportFor } from "./transport.js";
import type { CreateFields, Envs, Limits, SessionInfo, WireEntry, WireEvent, WireResponse, WireSessionMetrics, WireWatchEvent } from "./wire.js";

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
  if (o.envs !== undefined) f["envs"] = checkEnvs(o.envs);
  return f;
}

function callOpts(o: RunCodeOpts, c: Collector, t: Transport): CallOptions {
  const co: CallOptions = { onEvent: c.event };
  if (o.requestTimeoutMs !== undefined) {
    co.timeoutMs = o.requestTimeoutMs;
  } else if (o.timeoutMs !== undefined) {
    co.timeoutMs = boundFor(t, o.timeoutMs);
  }
  if (o.signal) co.signal = o.signal;
  return co;
}

/** The session's working directory (/work): sandbox.files. */
export class Files {
  constructor(private readonly sbx: Sandbox) {}

  /**
   * Write data (a string as UTF-8, or bytes) to path, relative to the
   * working directory; parent directories are made. The file's metadata
   * becomes opts.metadata, or none.
   */
  async write(path: string, data: Data, opts?: WriteOpts): Promise<WriteInfo>;
  /** Write several files, one after another, each with opts.metadata. */
  async write(files: { path: string; data: Data }[], opts?: WriteOpts): Promise<WriteInfo[]>;
  async write(pathOrFiles: string | { path: string; data: Data }[], dataOrOpts?: Data | WriteOpts, opts?: WriteOpts): Promise<WriteInfo | WriteInfo[]> {
    if (Array.isArray(pathOrFiles)) {
      const o = (dataOrOpts ?? {}) as WriteOpts;
      const metadata = checkMetadata(o.metadata);
      const out: WriteInfo[] = [];
      for (const f of pathOrFiles) {
        out.push(await this.write(f.path, f.data, { metadata }));
      }
      return out;
    }
    const path = pathOrFiles;
    const data = dataOrOpts as Data | undefined;
    if (data === undefined) {
      throw badRequest("files.write needs data: a string, Uint8Array, ArrayBuffer or Blob");
    }
    const metadata = checkMetadata(opts?.metadata);
    const resp = await this.sbx.call("upload", { path, data: await bytes(data, "data"), metadata });
    const info: WriteInfo = { name: path.split("/").pop() ?? path, path, type: "file", size: typeof resp.size === "number" ? resp.size : 0 };
    const written = strings(resp.metadata);
    if (written !== undefined) info.metadata = written;
    return info;
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
      out.push(entryInfo(e, p, this.workdir()));
    }
    return out;
  }

  /** Whether anything (a file or a directory) is at path. */
  async exists(path: string): Promise<boolean> {
    try {
      await this.sbx.call("stat", { path });
      return true;
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
  }

  /** What is at path: a file or a directory (NotFoundError if nothing). */
  async getInfo(path: string): Promise<EntryInfo> {
    const e = (await this.sbx.call("stat", { path })).entry;
    return entryInfo(e, path, this.workdir());
  }

  /** The directory entry paths are under, as the sandbox names it: /work, or /home/user if the session starts there. */
  private workdir(): string {
    return this.sbx.info.cwd === "/home/user" ? "/home/user" : "/work";
  }

  /** Remove a file, or a directory with everything in it (NotFoundError if nothing is there). */
  async remove(path: string): Promise<void> {
    await this.sbx.call("remove", { path });
  }

  /**
   * Move a file or directory to newPath (E2B's files.rename), in one
   * rename(2): the sandbox sees the old path or the new, never a copy half
   * made, and metadata goes along. newPath's missing parents are made. A
   * file may replace a file; a directory moves only to where nothing is,
   * and nothing onto or into itself (BadRequestError). NotFoundError if
   * nothing is at oldPath.
   */
  async rename(oldPath: string, newPath: string): Promise<EntryInfo> {
    const e = (await this.sbx.call("rename", { path: oldPath, to: newPath })).entry;
    return entryInfo(e, newPath, this.workdir());
  }

  /** Make a directory and its parents; false if it was a directory already. */
  async makeDir(path: string): Promise<boolean> {
    return (await this.sbx.call("mkdir", { path })).created === true;
  }

  /**
   * Watch a directory of the workspace ("" or "." for all of it): onEvent
   * gets each change (create, write, remove, rename; names relative to the
   * directory, as the sandbox wrote them). E2B streams these; jailcell
   * polls from the host's side every pollMs (default 250 ms), so a file
   * made and removed between two polls is not seen. onExit is called once
   * when the watch ends by itself (the session ended, a poll failed) with
   * the error; stop() ends it.
   */
  async watchDir(path: string, onEvent: (ev: FilesystemEvent) => unknown, opts: WatchOpts = {}): Promise<WatchHandle> {
    if (typeof onEvent !== "function") {
      throw badRequest("watchDir needs onEvent: a function that takes each FilesystemEvent");
    }
    const pollMs = opts.pollMs ?? 250;
    if (typeof pollMs !== "number" || !Number.isFinite(pollMs) || pollMs < 100) {
      throw badRequest(`pollMs = ${String(pollMs)}: must be a number of milliseconds >= 100 (the service answers nothing to closer polls)`);
    }
    const resp = await this.sbx.call("watch", { action: "start", path, recursive: opts.recursive === true });
    if (typeof resp.watch !== "string" || resp.watch === "") {
      throw new InternalError(0, "internal", "watch start answered no watch id");
    }
    return new WatchHandle(this.sbx, resp.watch, onEvent, pollMs, opts.onExit);
  }
}

/**
 * E2B's EntryInfo of a wire entry, as envd makes it: mode the permission
 * bits, permissions Go's FileMode text, owner and group names. Unlike envd
 * the link is not followed (the service reads the workspace from the host):
 * a symlink's mode is 0 and its target is made absolute against its
 * directory under workdir.
 */
function entryInfo(e: WireEntry | undefined, fallback: string, workdir: string): EntryInfo {
  const p = typeof e?.path === "string" ? e.path : fallback;
  const t = typeof e?.mtime === "string" ? new Date(e.mtime) : undefined;
  const bits = typeof e?.mode === "number" && Number.isInteger(e.mode) ? e.mode & 0o7777 : 0;
  const type = e?.dir === true ? "dir" : e?.symlink === true ? "symlink" : "file";
  const info: EntryInfo = {
    name: p.split("/").pop() ?? p,
    path: p,
    type,
    size: typeof e?.size === "number" ? e.size : 0,
    mode: type === "symlink" ? 0 : bits & 0o777,
    permissions: permissions(type, bits),
    owner: idName(e?.uid),
    group: idName(e?.gid),
    modifiedTime: t && !Number.isNaN(t.getTime()) ? t : undefined,
  };
  if (type === "symlink" && typeof e?.link === "string" && e.link !== "") {
    info.symlinkTarget = e.link.startsWith("/") ? normalize(e.link) : normalize(`${workdir}/${p.split("/").slice(0, -1).join("/")}/${e.link}`);
  }
  const metadata = strings(e?.metadata);
  if (metadata !== undefined) info.metadata = metadata;
  return info;
}

/**
 * The string entries of a wire map, as own properties (a key such as
 * "__proto__" stays a key); undefined for none or anything but an object.
 */
function strings(m: unknown): Record<string, string> | undefined {
  if (m === null || typeof m !== "object" || Array.isArray(m)) return undefined;
  const kept = Object.entries(m).filter((kv): kv is [string, string] => typeof kv[1] === "string");
  return kept.length > 0 ? Object.fromEntries(kept) : undefined;
}

/**
 * files.write's metadata: an object of strings, or undefined. The service
 * checks the rest (printable ASCII, key lengths, 4096 bytes in all) and
 * names what it refuses.
 */
function checkMetadata(m: unknown): Record<string, string> | undefined {
  if (m === undefined || m === null) return undefined;
  if (typeof m !== "object" || Array.isArray(m)) {
    throw badRequest("metadata must be an object of key to string value");
  }
  for (const [k, v] of Object.entries(m)) {
    if (typeof v !== "string") {
      throw badRequest(`metadata[${JSON.stringify(k)}] must be a string, got ${typeof v}`);
    }
  }
  return m as Record<string, string>;
}

/** Go's os.FileMode.String() of an entry of this type with st_mode bits (the 0o7777 part). */
function permissions(type: EntryInfo["type"], bits: number): string {
  let s = type === "dir" ? "d" : type === "symlink" ? "L" : "";
  if (bits & 0o4000) s += "u";
  if (bits & 0o2000) s += "g";
  if (bits & 0o1000) s += "t";
  if (s === "") s = "-";
  const rwx = "rwxrwxrwx";
  for (let i = 0; i < 9; i++) {
    s += bits & (1 << (8 - i)) ? rwx[i] : "-";
  }
  return s;
}

/** A sandbox id by name, as its rootfs names the two it has; any other is its number. */
function idName(id: number | undefined): string {
  if (typeof id !== "number" || id === 0) return "root";
  if (id === 65534) return "nobody";
  return String(id);
}

/** An absolute path with ".", ".." and repeated slashes resolved lexically, as Go's path.Clean. */
function normalize(p: string): string {
  const out: string[] = [];
  for (const part of p.split("/")) {
    if (part === "" || part === ".") continue;
    if (part === "..") out.pop();
    else out.push(part);
  }
  return "/" + out.join("/");
}

/** E2B's filesystem event types; jailcell reports no chmod. */
export const FilesystemEventType = {
  CHMOD: "chmod",
  CREATE: "create",
  REMOVE: "remove",
  RENAME: "rename",
  WRITE: "write",
} as const;
export type FilesystemEventType = (typeof FilesystemEventType)[keyof typeof FilesystemEventType];

/** One change in a watched directory: E2B's FilesystemEvent. name is untrusted (the sandbox named it). */
export interface FilesystemEvent {
  name: string;
  type: FilesystemEventType;
}

/** files.write's options, E2B's names. */
export interface WriteOpts {
  /**
   * The file's metadata, replacing what it had (none: cleared), kept in its
   * user.e2b.* extended attributes: keys of 1 to 246 bytes, keys and values
   * printable ASCII, at most 4096 bytes in all counting 9 per key; the
   * service refuses others (BadRequestError naming the key) and writes no
   * file. Keys are kept as given (E2B's lowercases them).
   */
  metadata?: Record<string, string>;
}

export interface WatchOpts {
  /** Watch subdirectories too. */
  recursive?: boolean;
  /** How often to poll, in ms (default 250, at least 100). jailcell's own. */
  pollMs?: number;
  /** Called once if the watch ends by itself (the session ended, a poll failed), with the error. */
  onExit?: (err?: Error) => unknown;
}

/**
 * A directory watch (E2B's WatchHandle): polls the service until stop().
 * Polls never overlap; a callback's promise is awaited before the next
 * poll. overflow (more than 1000 changes between polls) is on the handle.
 */
export class WatchHandle {
  private stopped = false;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> = Promise.resolve();
  /** A poll saw more changes than the service reports at once: some were dropped. */
  overflow = false;

  constructor(
    private readonly sbx: Sandbox,
    /** The watch's id on the service. */
    readonly id: string,
    private readonly onEvent: (ev: FilesystemEvent) => unknown,
    private readonly pollMs: number,
    private readonly onExit: ((err?: Error) => unknown) | undefined,
  ) {
    this.schedule();
  }

  private schedule(): void {
    this.timer = setTimeout(() => {
      this.running = this.poll();
    }, this.pollMs);
  }

  private async poll(): Promise<void> {
    if (this.stopped) return;
    try {
      const resp = await this.sbx.call("watch", { action: "poll", watch: this.id });
      if (resp.overflow === true) this.overflow = true;
      for (const ev of resp.events ?? []) {
        if (this.stopped) return;
        if (ev !== null && typeof ev === "object" && typeof ev.name === "string") {
          await this.onEvent({ name: ev.name, type: ev.type as WireWatchEvent["type"] });
        }
      }
    } catch (e) {
      if (this.stopped) return;
      this.stopped = true;
      await this.onExit?.(e as Error);
      return;
    }
    if (!this.stopped) this.schedule();
  }

  /** Stop polling and end the watch on the service (a session already gone is fine). */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    clearTimeout(this.timer);
    await this.running.catch(() => {});
    try {
      await this.sbx.call("watch", { action: "stop", watch: this.id });
    } catch (e) {
      if (!(e instanceof NotFoundError)) throw e;
    }
  }
}

export interface SandboxOpts extends TransportChoice {
  /** A transport shared with other sandboxes (not closed by kill). */
  transport?: Transport;
  /** Idle timeout: the session ends after this long without a call (default: the service's). */
  ttlMs?: number;
  /** E2B's name for ttlMs (give one of them): the sandbox ends this long after its last use; setTimeout renews it. */
  timeoutMs?: number;
  /** Your own labels, kept by this client and given back in getInfo() (E2B's metadata; the service does not store them). */
  metadata?: Record<string, string>;
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
  /**
   * At its idle timeout, hibernate the session (kernel, processes and files
   * checkpointed to disk; its next cell or restore() brings them back)
   * instead of ending it; maxLifetimeMs still ends it. A host without
   * checkpoint/restore refuses the create (UnavailableError).
   */
  hibernateOnIdle?: boolean;
  /** E2B's name for hibernateOnIdle (give one of them): onTimeout "pause" is hibernateOnIdle, "kill" (the default) is not. */
  lifecycle?: SandboxLifecycle;
}

/**
 * E2B's SandboxLifecycle: what the sandbox's timeout does to it. A jailcell
 * sandbox pauses only with its memory, so keepMemory may only be true.
 */
export interface SandboxLifecycle {
  onTimeout: "kill" | "pause" | { action: "pause"; keepMemory?: boolean } | { action: "kill" };
  /**
   * E2B's: traffic resumes a paused sandbox. A paused jailcell sandbox comes
   * back on its next cell either way; true needs onTimeout "pause", as E2B's.
   */
  autoResume?: boolean;
}

/** E2B's default templates: create(template) with one of them is the default policy. */
const E2B_DEFAULT_TEMPLATES = new Set(["base", "code-interpreter-v1"]);

function shown(v: unknown): string {
  return JSON.stringify(v) ?? String(v);
}

/**
 * Whether E2B's lifecycle asks for a pause at the timeout. What jailcell
 * cannot do is refused by name rather than dropped: a sandbox that ends
 * where its caller expected it paused loses its state.
 */
function pauseOnTimeout(l: unknown): boolean {
  if (l === null || typeof l !== "object" || Array.isArray(l)) {
    throw badRequest(`lifecycle = ${shown(l)}: must be an object, { onTimeout: "kill" | "pause", autoResume?: boolean }`);
  }
  const { onTimeout, autoResume } = l as Record<string, unknown>;
  let action = onTimeout;
  if (onTimeout !== null && typeof onTimeout === "object" && !Array.isArray(onTimeout)) {
    const o = onTimeout as Record<string, unknown>;
    action = o["action"];
    const keep = o["keepMemory"];
    if (keep === false) {
      throw badRequest(
        "lifecycle.onTimeout.keepMemory = false: jailcell pauses a sandbox with its memory (its variables and processes), never its files alone; leave it unset or true",
      );
    }
    if (keep !== undefined && keep !== true) {
      throw badRequest(`lifecycle.onTimeout.keepMemory = ${shown(keep)}: must be true or unset`);
    }
    if (keep === true && action !== "pause") {
      throw badRequest(`lifecycle.onTimeout.keepMemory goes with action "pause" only, not ${shown(action)}`);
    }
  }
  if (action !== "kill" && action !== "pause") {
    throw badRequest(
      `lifecycle.onTimeout = ${shown(onTimeout)}: allowed "kill" (the default: the timeout ends the sandbox), "pause" (it hibernates it, memory and all) or { action: "kill" | "pause", keepMemory?: true }`,
    );
  }
  if (autoResume !== undefined && typeof autoResume !== "boolean") {
    throw badRequest(`lifecycle.autoResume = ${shown(autoResume)}: must be a boolean`);
  }
  if (autoResume === true && action !== "pause") {
    throw badRequest('lifecycle.autoResume: true needs onTimeout "pause": only a paused sandbox resumes');
  }
  return action === "pause";
}

function createFields(o: SandboxOpts): CreateFields {
  const f: CreateFields = {};
  if (o.ttlMs !== undefined && o.timeoutMs !== undefined) {
    throw badRequest("give ttlMs or timeoutMs (E2B's name for it), not both");
  }
  const ttl = o.timeoutMs !== undefined ? seconds(o.timeoutMs, "timeoutMs") : seconds(o.ttlMs, "ttlMs");
  const life = seconds(o.maxLifetimeMs, "maxLifetimeMs");
  if (ttl !== undefined) f.ttl_s = ttl;
  if (life !== undefined) f.max_lifetime_s = life;
  if (o.policy !== undefined) f.policy = o.policy;
  if (o.limits !== undefined) f.limits = o.limits;
  if (o.persist !== undefined) f.persist = o.persist;
  if (o.requirements !== undefined) f.requirements = o.requirements;
  if (o.envs !== undefined) f.envs = checkEnvs(o.envs);
  if (o.hibernateOnIdle !== undefined && o.lifecycle !== undefined) {
    throw badRequest("give hibernateOnIdle or lifecycle (E2B's name for it), not both");
  }
  if (o.hibernateOnIdle !== undefined && typeof o.hibernateOnIdle !== "boolean") {
    throw badRequest(`hibernateOnIdle = ${shown(o.hibernateOnIdle)}: must be a boolean`);
  }
  if (o.lifecycle !== undefined ? pauseOnTimeout(o.lifecycle) : o.hibernateOnIdle === true) {
    f.hibernate_on_idle = true;
  }
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
  /** Shell commands inside the sandbox (E2B's sandbox.commands). */
  readonly commands: Commands;
  /** Interactive terminals inside the sandbox (E2B's sandbox.pty). */
  readonly pty: Pty;
  /** The labels given to create or connect (kept here; E2B's metadata). */
  readonly metadata: Record<string, string>;
  private closed = false;

  private constructor(
    readonly transport: Transport,
    private readonly ownsTransport: boolean,
    info: SessionInfo,
    metadata: Record<string, string> = {},
  ) {
    this.info = info;
    this.files = new Files(this);
    this.commands = new Commands(this);
    this.pty = new Pty(this.commands);
    this.metadata = { ...metadata };
  }

  /** A new session; resolves once its kernel is ready. */
  static async create(templateOrOpts: string | SandboxOpts = {}, opts: SandboxOpts = {}): Promise<Sandbox> {
    if (typeof templateOrOpts === "string") {
      // E2B's create(template, opts): a template is a policy here; E2B's
      // default templates mean the default policy.
      if (opts.policy !== undefined && opts.policy !== templateOrOpts) {
        throw badRequest(`template ${JSON.stringify(templateOrOpts)} and policy ${JSON.stringify(opts.policy)}: give one`);
      }
      opts = E2B_DEFAULT_TEMPLATES.has(templateOrOpts) ? opts : { ...opts, policy: templateOrOpts };
    } else {
      opts = templateOrOpts;
    }
    const fields = createFields(opts);
    const { transport, owned } = ownTransport(opts);
    try {
      const info = sessionInfo(await transport.call("create", fields as Fields));
      if (fields.hibernate_on_idle === true && info.hibernate_on_idle !== true) {
        // A server older than the field ignores it: its session would end
        // at the timeout, with what the caller meant to keep.
        await transport.call("close", { session: info.session }).catch(() => {});
        throw new UnavailableError(
          0,
          "unavailable",
          `the service ignored hibernate_on_idle (it is older than the field): session ${info.session} would end at its timeout, so it was closed`,
        );
      }
      return new Sandbox(transport, owned, info, opts.metadata);
    } catch (e) {
      if (owned) await transport.close();
      throw e;
    }
  }

  /**
   * Attach to a live session by its id (E2B's Sandbox.connect): the same
   * variables and files. NotFoundError if it ended or is another user's.
   * Over `jailcell json` only that process's sessions can be reached: pass
   * its transport (a command starts a new process, which has none).
   * timeoutMs, if given, is setTimeout's.
   */
  static async connect(sandboxId: string, opts: ConnectOpts = {}): Promise<Sandbox> {
    if (typeof sandboxId !== "string" || sandboxId === "") {
      throw badRequest("sandboxId must be a session id");
    }
    const { transport, owned } = ownTransport(opts);
    try {
      const info = sessionInfo(await transport.call("info", { session: sandboxId }));
      const sbx = new Sandbox(transport, owned, info, opts.metadata);
      // As E2B's connect: a timeout only ever moves the end later.
      const end = info.expires_at ? Date.parse(info.expires_at) : undefined;
      if (opts.timeoutMs !== undefined && (end === undefined || end < Date.now() + opts.timeoutMs)) {
        await sbx.setTimeout(opts.timeoutMs);
      }
      return sbx;
    } catch (e) {
      if (owned) await transport.close();
      throw e;
    }
  }

  /**
   * End the session timeoutMs from now unless it is used again (E2B's
   * setTimeout; every request renews it too). Past the service's
   * max_idle_ttl or the session's lifetime: BadRequestError naming the limit.
   */
  async setTimeout(timeoutMs: number): Promise<void> {
    if (typeof timeoutMs !== "number" || !Number.isFinite(timeoutMs) || timeoutMs <= 0) {
      throw badRequest(`timeoutMs = ${String(timeoutMs)}: must be a number of milliseconds > 0`);
    }
    this.info = sessionInfo(await this.call("set_timeout", { timeout_s: timeoutMs / 1000 }));
  }

  /** The sandbox as it is now (E2B's getInfo): state, startedAt, endAt (when it ends unless used). */
  async getInfo(): Promise<SandboxInfo> {
    this.info = sessionInfo(await this.call("info", {}));
    return sandboxInfo(this.info, this.metadata);
  }

  /**
   * The sandbox's usage now, one sample in a list (E2B keeps a history
   * every 5 s; jailcell reads the session's cgroup and disk when asked, so
   * start and end are accepted and ignored).
   */
  async getMetrics(_opts: { start?: Date | string | number; end?: Date | string | number } = {}): Promise<SandboxMetrics[]> {
    const m = (await this.call("metrics", {})).metrics;
    if (m === undefined || m === null || typeof m !== "object") {
      throw new InternalError(0, "internal", "metrics answered no metrics");
    }
    return [sandboxMetrics(m)];
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
      return await c.finish(await transport.call("exec", fields, callOpts(opts, c, transport)));
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
    return c.finish(await this.transport.call("exec", fields, callOpts(opts, c, this.transport)));
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
    try {
      await this.call("info", {});
      return true;
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
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

export interface ConnectOpts extends TransportChoice {
  /** A transport shared with other sandboxes (not closed by kill); over `jailcell json`, the one the session was made on. */
  transport?: Transport;
  /** Renew the session's timeout on connect (setTimeout). */
  timeoutMs?: number;
  metadata?: Record<string, string>;
}

/** A sandbox as it is now: E2B's SandboxInfo, plus the session's own state, policy and cells. */
export interface SandboxInfo {
  sandboxId: string;
  /** The session's policy (jailcell has no templates: a policy is the nearest thing). */
  templateId: string;
  name?: string;
  metadata: Record<string, string>;
  startedAt: Date | undefined;
  /** When it ends unless used again. */
  endAt: Date | undefined;
  /** E2B's: "paused" when hibernated, else "running". */
  state: "running" | "paused";
  /** The session's own: ready, busy, starting, hibernated, lost. */
  jailcellState: SessionInfo["state"];
  policy: string;
  cells: number;
  /** E2B's: "pause" when the timeout hibernates the sandbox (hibernateOnIdle), which its next cell resumes. */
  lifecycle: { onTimeout: "kill" | "pause"; autoResume: boolean };
}

function date(v: unknown): Date | undefined {
  if (typeof v !== "string" || v === "") return undefined;
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? undefined : d;
}

function sandboxInfo(info: SessionInfo, metadata: Record<string, string>): SandboxInfo {
  return {
    sandboxId: info.session,
    templateId: info.policy,
    metadata: { ...metadata },
    startedAt: date(info.created_at),
    endAt: date(info.expires_at),
    state: info.state === "hibernated" ? "paused" : "running",
    jailcellState: info.state,
    policy: info.policy,
    cells: info.cells,
    lifecycle: { onTimeout: info.hibernate_on_idle === true ? "pause" : "kill", autoResume: info.hibernate_on_idle === true },
  };
}

/** One sample of a sandbox's usage (E2B's SandboxMetrics), read by the host from the session's cgroup and disk. */
export interface SandboxMetrics {
  timestamp: Date | undefined;
  cpuUsedPct: number;
  cpuCount: number;
  /** Bytes. */
  memUsed: number;
  memTotal: number;
  diskUsed: number;
  diskTotal: number;
  // jailcell's own.
  cpuSeconds: number;
  memPeak: number;
  running: boolean;
}

function num(v: unknown): number {
  return typeof v === "number" && Number.isFinite(v) ? v : 0;
}

function sandboxMetrics(m: WireSessionMetrics): SandboxMetrics {
  return {
    timestamp: date(m.timestamp),
    cpuUsedPct: num(m.cpu_used_pct),
    cpuCount: num(m.cpu_count),
    memUsed: num(m.mem_used),
    memTotal: num(m.mem_total),
    diskUsed: num(m.disk_used),
    diskTotal: num(m.disk_total),
    cpuSeconds: num(m.cpu_seconds),
    memPeak: num(m.mem_peak),
    running: m.running === true,
  };
}

function sessionInfo(resp: WireResponse): SessionInfo {
  const { id: _id, ok: _ok, ...info } = resp;
  if (typeof info.session !== "string" || info.session === "") {
    throw new InternalError(0, "internal", `the response names no session: ${JSON.stringify(resp).slice(0, 200)}`);
  }
  return info as unknown as SessionInfo;
}
