/**
 * The ways to reach jailcell: HTTP on the service's Unix socket (`jailcell
 * serve`), HTTP(S) on its TCP listener with a bearer token, and a `jailcell
 * json` subprocess (JSON lines on its stdin/stdout). All take the same wire
 * requests (an op and its fields) and give back the same response objects,
 * so everything above is written once.
 *
 * Everything read from jailcell is bounded: a response body, a streamed
 * line or a JSON line may hold at most maxResponseBytes.
 */

import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import * as http from "node:http";
import * as https from "node:https";

import { InternalError, JailcellError, TimeoutError, UnavailableError, badRequest, errorFor } from "./errors.js";
import type { WireEvent, WireResponse } from "./wire.js";

/** Where `jailcell serve` listens unless configured. */
export const DEFAULT_SOCKET = "/run/jailcell/jailcell.sock";

/**
 * Bounds one response body or line: a result with its files, base64 (the
 * service's own bound on a JSON body is 32 MiB; a one-shot result may carry
 * up to the policy's return_file_bytes).
 */
export const MAX_RESPONSE_BYTES = 400 << 20;

/**
 * Default bound on one call: above the longest cell a policy allows
 * (max_timeout, 10 min by default).
 */
export const DEFAULT_REQUEST_TIMEOUT_MS = 900_000;

export type Fields = Record<string, unknown>;

/** Receives an exec's streamed events in order; a returned promise is awaited before the next. */
export type OnEvent = (ev: WireEvent) => unknown;

export interface CallOptions {
  /** For an exec or a command: receives its stdout, stderr and display events first (the call is then streamed). */
  onEvent?: OnEvent;
  /** Bound on this call (default: the transport's requestTimeoutMs). */
  timeoutMs?: number;
  /**
   * Aborts the call. Over HTTP the connection closes and the service
   * interrupts a running cell; over JSON lines the cell runs on.
   */
  signal?: AbortSignal;
}

/** What Sandbox needs from a way to reach jailcell. */
export interface Transport {
  /**
   * Send one request (op and its wire fields; Uint8Array values travel as
   * base64) and return its response; an error response rejects with its
   * JailcellError class. A download's data is bytes.
   */
  call(op: string, fields: Fields, opts?: CallOptions): Promise<WireResponse>;
  /** Release what the transport holds. */
  close(): Promise<void>;
  readonly description: string;
  /**
   * The transport's own bound on a call, in ms (default 900 s when absent):
   * a call for a longer cell is given more, never less.
   */
  readonly requestTimeoutMs?: number;
}

/**
 * The bound on a call that waits for a cell or command of timeoutMs: the
 * transport's own bound, or timeoutMs and a minute more if that is longer.
 */
export function boundFor(transport: Pick<Transport, "requestTimeoutMs"> | undefined, timeoutMs: number): number {
  return Math.max(transport?.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS, timeoutMs + 60_000);
}

/** Deep copy of v with every Uint8Array as standard base64, for JSON. */
export function toWire(v: unknown): unknown {
  if (v instanceof Uint8Array) {
    return Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString("base64");
  }
  if (Array.isArray(v)) {
    return v.map(toWire);
  }
  if (v !== null && typeof v === "object") {
    // fromEntries, not assignment: a key such as "__proto__" (a file's
    // metadata may have one) stays a key instead of vanishing.
    return Object.fromEntries(Object.entries(v).flatMap(([k, x]) => (x !== undefined && x !== null ? [[k, toWire(x)]] : [])));
  }
  return v;
}

/** A response object; an error response rejects with its class. */
function checked(status: number, msg: unknown): WireResponse {
  if (msg === null || typeof msg !== "object" || Array.isArray(msg)) {
    throw new InternalError(status, "internal", `response is not a JSON object: ${clip(JSON.stringify(msg))}`);
  }
  const m = msg as Record<string, unknown>;
  if (m["ok"] !== true) {
    const e = (m["error"] !== null && typeof m["error"] === "object" ? m["error"] : {}) as Record<string, unknown>;
    throw errorFor(status, str(e["code"]), str(e["message"]), str(e["state"]));
  }
  return m as WireResponse;
}

function decode(status: number, data: Buffer): WireResponse {
  let msg: unknown;
  try {
    msg = JSON.parse(data.toString("utf8"));
  } catch {
    throw new InternalError(status, "internal", `response (HTTP ${status}) is not JSON: ${clip(data.toString("utf8"))}`);
  }
  return checked(status, msg);
}

function str(v: unknown): string | undefined {
  return typeof v === "string" ? v : undefined;
}

function clip(s: string | undefined, n = 200): string {
  if (s === undefined) {
    return "undefined";
  }
  return s.length <= n ? s : s.slice(0, n) + "...";
}

/**
 * Splits a byte stream into lines, none longer than max bytes (a line
 * without its newline counts while it grows: a peer that never sends one
 * cannot make it allocate more).
 */
class LineSplitter {
  private parts: Buffer[] = [];
  private size = 0;
  constructor(private readonly max: number) {}

  /** The complete lines in chunk (without their newlines); throws past the bound. */
  push(chunk: Buffer): Buffer[] {
    const lines: Buffer[] = [];
    let start = 0;
    for (let nl = chunk.indexOf(10, start); nl >= 0; nl = chunk.indexOf(10, start)) {
      const piece = chunk.subarray(start, nl);
      if (this.size + piece.length > this.max) {
        throw new Error(`a line over ${this.max} bytes`);
      }
      this.parts.push(piece);
      lines.push(this.parts.length === 1 ? this.parts[0]! : Buffer.concat(this.parts));
      this.parts = [];
      this.size = 0;
      start = nl + 1;
    }
    const rest = chunk.subarray(start);
    if (rest.length > 0) {
      if (this.size + rest.length > this.max) {
        throw new Error(`a line over ${this.max} bytes`);
      }
      this.parts.push(rest);
      this.size += rest.length;
    }
    return lines;
  }

  /** What is left after the stream ended. */
  rest(): Buffer {
    return Buffer.concat(this.parts);
  }
}

function isEvent(msg: unknown): msg is WireEvent {
  return msg !== null && typeof msg === "object" && "event" in msg;
}

/** A deadline and an abort signal, as one rejection. */
class Deadline {
  readonly promise: Promise<never>;
  private timer: NodeJS.Timeout | undefined;
  private reject!: (e: JailcellError) => void;
  private readonly onAbort: () => void;

  constructor(
    what: string,
    ms: number,
    private readonly signal: AbortSignal | undefined,
  ) {
    this.promise = new Promise<never>((_, reject) => {
      this.reject = reject;
    });
    this.promise.catch(() => {}); // observed by whoever races it
    // setTimeout fires at once past 2^31-1 ms: Infinity means "no bound"
    // only up to that (24 days).
    const wait = Number.isFinite(ms) && ms >= 0 ? Math.min(ms, 2 ** 31 - 1) : 2 ** 31 - 1;
    this.timer = setTimeout(() => this.fire(new TimeoutError(0, "timeout", `${what}: no answer within ${ms} ms`)), wait);
    this.onAbort = () => this.fire(new TimeoutError(0, "aborted", `${what}: aborted`));
    if (signal?.aborted) {
      this.onAbort();
    } else {
      signal?.addEventListener("abort", this.onAbort, { once: true });
    }
  }

  private fire(e: JailcellError): void {
    this.reject(e);
  }

  clear(): void {
    clearTimeout(this.timer);
    this.signal?.removeEventListener("abort", this.onAbort);
  }
}

export interface HttpTransportOptions {
  /** The service's Unix socket (HTTP/1.1 on AF_UNIX; default $JAILCELL_SOCKET, else /run/jailcell/jailcell.sock). */
  socketPath?: string;
  /**
   * The service's TCP listener, e.g. "http://127.0.0.1:8080" or
   * "https://jailcell.example:8443" (a path prefix is kept).
   */
  url?: string;
  /** Bearer token for TCP (auth.tokens_file); sent as Authorization: Bearer. */
  token?: string;
  /** TLS options for https (ca, cert, key for mTLS, servername...). */
  tls?: https.RequestOptions;
  /** Bound on each call (default 900 s). */
  requestTimeoutMs?: number;
  /** Bound on a response body or streamed line (default 400 MiB). */
  maxResponseBytes?: number;
}

/** How an op travels over HTTP. */
interface Route {
  method: "GET" | "POST" | "PUT" | "DELETE";
  /** The URL path, from the session id and the fields. */
  path: (session: string | undefined, f: Fields) => string;
  /** json: fields as a JSON body; none: no body; raw: data as the body; download: raw bytes back; exec: a JSON body, streamed back when onEvent is given (exec, command). */
  body: "json" | "none" | "raw" | "download" | "exec";
}

function sessionPath(session: string | undefined, ...rest: string[]): string {
  if (typeof session !== "string" || session === "") {
    throw badRequest("this op needs a session id");
  }
  return ["/v1/sessions/" + encodeURIComponent(session), ...rest].join("/");
}

/** Carries an upload's metadata as one JSON object of strings (api/metadata.go). */
const METADATA_HEADER = "jailcell-metadata";

/**
 * The longest header a map the service keeps can make: 4096 bytes in all,
 * no byte escaped to more than two, and each key's 9-byte share covering
 * its quotes, colon and comma. A longer one is refused here, since past
 * the service's header bound (16 KiB) it would be answered 431, not
 * bad_request.
 */
const MAX_METADATA_HEADER = 2 * 4096 + 2;

/**
 * An upload's metadata as the header's JSON (undefined for none), in
 * ASCII: DEL and every non-ASCII character go \u-escaped, since node
 * refuses DEL and characters past U+00FF in a header and sends the rest as
 * Latin-1. So a key the service refuses reaches it intact and is refused
 * by name, as over JSON lines.
 */
function metadataHeader(m: unknown): string | undefined {
  if (m === undefined || m === null) return undefined;
  if (typeof m !== "object" || Array.isArray(m)) {
    throw badRequest("metadata must be an object of key to string value");
  }
  if (Object.keys(m).length === 0) return undefined;
  const v = JSON.stringify(m).replace(/[\u007f-\uffff]/g, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
  if (v.length > MAX_METADATA_HEADER) {
    throw badRequest(`metadata of ${v.length} bytes as JSON: a file's metadata is at most 4096 bytes (each key counted with a 9-byte prefix)`);
  }
  return v;
}

/** The URL path of a path op under the session's segment (files, stat, dirs). */
const pathIn =
  (segment: string) =>
  (session: string | undefined, f: Fields): string => {
    const p = f["path"];
    if (typeof p !== "string" || p === "") {
      throw badRequest("a file op needs a path relative to the working directory");
    }
    return sessionPath(session, segment, p.split("/").map(encodeURIComponent).join("/"));
  };
const filePath = pathIn("files");

const life = (op: string): Route => ({ method: "POST", path: (s) => sessionPath(s, op), body: "none" });
const assist = (op: string): Route => ({ method: "POST", path: (s) => sessionPath(s, op), body: "json" });

/**
 * The HTTP route of each op (api/httpapi/http.go matchRoute). An op the server
 * adds with a route of its own is one entry here.
 */
const ROUTES: Record<string, Route> = {
  ping: { method: "GET", path: () => "/healthz", body: "none" },
  sessions: { method: "GET", path: () => "/v1/sessions", body: "none" },
  create: { method: "POST", path: () => "/v1/sessions", body: "json" },
  close: { method: "DELETE", path: (s) => sessionPath(s), body: "none" },
  files: { method: "GET", path: (s) => sessionPath(s, "files"), body: "none" },
  upload: { method: "PUT", path: filePath, body: "raw" },
  download: { method: "GET", path: filePath, body: "download" },
  exec: { method: "POST", path: (s) => (s ? sessionPath(s, "exec") : "/v1/exec"), body: "exec" },
  hibernate: life("hibernate"),
  restore: life("restore"),
  fork: life("fork"),
  snapshot: life("snapshot"),
  rollback: life("rollback"),
  interrupt: life("interrupt"),
  complete: assist("complete"),
  inspect: assist("inspect"),
  is_complete: assist("is_complete"),
  command: { method: "POST", path: (s) => sessionPath(s, "commands"), body: "exec" },
  info: { method: "GET", path: (s) => sessionPath(s), body: "none" },
  set_timeout: assist("timeout"),
  metrics: { method: "GET", path: (s) => sessionPath(s, "metrics"), body: "none" },
  watch: assist("watch"),
  stat: { method: "GET", path: pathIn("stat"), body: "none" },
  mkdir: { method: "PUT", path: pathIn("dirs"), body: "none" },
  remove: { method: "DELETE", path: filePath, body: "none" },
  rename: assist("rename"),
};

/**
 * `jailcell serve` over HTTP: on its Unix socket (the caller is the uid the
 * kernel reports), or on its TCP listener with a bearer token. Each call
 * uses its own connection, so one transport may serve many sandboxes at
 * once.
 */
export class HttpTransport implements Transport {
  readonly description: string;
  readonly requestTimeoutMs: number;
  private readonly socketPath: string | undefined;
  // The credentials are ES private fields, not TypeScript's compile-time
  // private: those are ordinary properties at run time, and console.log,
  // util.inspect or JSON.stringify of a Sandbox (which holds its
  // transport) would print the bearer token, the TLS key and a URL's
  // password into whatever log the caller keeps.
  readonly #base: URL | undefined;
  readonly #token: string | undefined;
  readonly #tls: https.RequestOptions;
  private readonly max: number;

  constructor(opts: HttpTransportOptions = {}) {
    if (opts.socketPath !== undefined && opts.url !== undefined) {
      throw badRequest("give socketPath or url, not both: socketPath is the service's Unix socket, url its TCP listener");
    }
    if (opts.url !== undefined) {
      let u: URL;
      try {
        u = new URL(opts.url);
      } catch {
        throw badRequest(`url ${JSON.stringify(opts.url)} is not a URL; want http://HOST:PORT or https://HOST:PORT`);
      }
      if (u.protocol !== "http:" && u.protocol !== "https:") {
        throw badRequest(`url ${JSON.stringify(opts.url)}: scheme ${u.protocol} not allowed; allowed http: or https:`);
      }
      this.#base = u;
      this.description = `HttpTransport(${u.origin})`;
    } else {
      this.socketPath = opts.socketPath ?? (process.env["JAILCELL_SOCKET"] || DEFAULT_SOCKET);
      this.description = `HttpTransport(unix:${this.socketPath})`;
    }
    if (opts.token !== undefined && /[\r\n]/.test(opts.token)) {
      throw badRequest("token must not contain a line break");
    }
    this.#token = opts.token;
    this.#tls = opts.tls ?? {};
    this.requestTimeoutMs = opts.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
    this.max = opts.maxResponseBytes ?? MAX_RESPONSE_BYTES;
  }

  async call(op: string, fields: Fields, opts: CallOptions = {}): Promise<WireResponse> {
    const route = ROUTES[op];
    if (route === undefined) {
      throw badRequest(`op ${JSON.stringify(op)} has no route on the service; allowed: ${Object.keys(ROUTES).join(", ")}`);
    }
    const f: Fields = { ...fields };
    const session = typeof f["session"] === "string" ? (f["session"] as string) : undefined;
    delete f["session"];
    const path = route.path(session, f);
    const headers: http.OutgoingHttpHeaders = {};
    let body: Buffer | undefined;
    switch (route.body) {
      case "json":
      case "exec":
        if (route.body === "exec") {
          delete f["stream"];
          if (opts.onEvent) {
            headers["accept"] = "application/x-ndjson";
          }
        }
        body = Buffer.from(JSON.stringify(toWire(f)));
        headers["content-type"] = "application/json";
        break;
      case "raw": {
        const data = f["data"];
        if (!(data instanceof Uint8Array)) {
          throw badRequest("upload needs data: bytes (Uint8Array)");
        }
        body = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
        headers["content-type"] = "application/octet-stream";
        const meta = metadataHeader(f["metadata"]);
        if (meta !== undefined) {
          headers[METADATA_HEADER] = meta;
        }
        break;
      }
    }
    const deadline = new Deadline(`${op} via ${this.description}`, opts.timeoutMs ?? this.requestTimeoutMs, opts.signal);
    let req: http.ClientRequest | undefined;
    let res: http.IncomingMessage | undefined;
    const work = (async () => {
      res = await new Promise<http.IncomingMessage>((resolve, reject) => {
        req = this.send(route.method, path, body, headers, resolve, reject);
      });
      const status = res.statusCode ?? 0;
      if (route.body === "download" && status === 200) {
        const data = await readAll(res, this.max, status);
        return { ok: true, path: f["path"] as string, data: new Uint8Array(data), size: data.length, sha256: str(res.headers["x-jailcell-sha256"]) ?? "" } as WireResponse;
      }
      if (route.body === "exec" && (res.headers["content-type"] ?? "").startsWith("application/x-ndjson")) {
        return await readStream(res, this.max, status, opts.onEvent);
      }
      const resp = decode(status, await readAll(res, this.max, status));
      if (route.body === "download") {
        throw new InternalError(status, "internal", `download answered ${status} without an error`);
      }
      return resp;
    })();
    try {
      return await Promise.race([work, deadline.promise]);
    } catch (e) {
      work.catch(() => {});
      throw e;
    } finally {
      deadline.clear();
      res?.destroy();
      req?.destroy();
    }
  }

  /** Nothing to release: every call has its own connection. */
  async close(): Promise<void> {}

  private send(
    method: string,
    path: string,
    body: Buffer | undefined,
    headers: http.OutgoingHttpHeaders,
    resolve: (r: http.IncomingMessage) => void,
    reject: (e: Error) => void,
  ): http.ClientRequest {
    const h: http.OutgoingHttpHeaders = { ...headers, "content-length": body ? body.length : 0 };
    if (this.#token !== undefined) {
      h["authorization"] = `Bearer ${this.#token}`;
    }
    // agent: false: one connection per call; a kept-alive one can be
    // closed by the server's idle timeout just as it is reused.
    let req: http.ClientRequest;
    if (this.#base !== undefined) {
      const u = this.#base;
      const prefix = u.pathname.replace(/\/+$/, "");
      const o: https.RequestOptions = {
        ...(u.protocol === "https:" ? this.#tls : {}),
        protocol: u.protocol,
        hostname: u.hostname.replace(/^\[|\]$/g, ""),
        port: u.port || (u.protocol === "https:" ? 443 : 80),
        method,
        path: prefix + path,
        headers: h,
        agent: false,
      };
      req = (u.protocol === "https:" ? https : http).request(o, resolve);
    } else {
      req = http.request({ socketPath: this.socketPath, host: "jailcell", method, path, headers: h, agent: false }, resolve);
    }
    req.on("error", (e: NodeJS.ErrnoException) => {
      const where = this.#base ? this.#base.origin : this.socketPath;
      reject(new UnavailableError(0, "unavailable", `${method} ${path} via ${where}: ${e.message}`));
    });
    req.end(body);
    return req;
  }
}

async function readAll(res: http.IncomingMessage, max: number, status: number): Promise<Buffer> {
  const declared = Number(res.headers["content-length"] ?? -1);
  if (declared > max) {
    throw new InternalError(status, "internal", `response body of ${declared} bytes: over ${max} bytes (maxResponseBytes)`);
  }
  const parts: Buffer[] = [];
  let n = 0;
  try {
    for await (const chunk of res as AsyncIterable<Buffer>) {
      n += chunk.length;
      if (n > max) {
        throw new InternalError(status, "internal", `response body over ${max} bytes (maxResponseBytes)`);
      }
      parts.push(chunk);
    }
  } catch (e) {
    throw readError(e, status, "the response");
  }
  return Buffer.concat(parts);
}

/** A failed read as a JailcellError: the connection broke mid-answer. */
function readError(e: unknown, status: number, what: string): unknown {
  if (e instanceof JailcellError) {
    return e;
  }
  return new UnavailableError(status, "unavailable", `read ${what}: ${e instanceof Error ? e.message : String(e)}`);
}

/** Reads an NDJSON exec: events to onEvent, in order, then the response. */
async function readStream(res: http.IncomingMessage, max: number, status: number, onEvent: OnEvent | undefined): Promise<WireResponse> {
  // A callback's own error goes to the caller as it is; a broken
  // connection becomes unavailable.
  let inCallback = false;
  try {
    return await readLines(res, max, status, async (ev) => {
      inCallback = true;
      await onEvent?.(ev);
      inCallback = false;
    });
  } catch (e) {
    throw inCallback ? e : readError(e, status, "the streamed exec");
  }
}

async function readLines(res: http.IncomingMessage, max: number, status: number, onEvent: OnEvent): Promise<WireResponse> {
  const lines = new LineSplitter(max);
  for await (const chunk of res as AsyncIterable<Buffer>) {
    let got: Buffer[];
    try {
      got = lines.push(chunk);
    } catch (e) {
      throw new InternalError(status, "internal", `streamed exec: ${(e as Error).message}`);
    }
    for (const line of got) {
      const msg = parseLine(line, status);
      if (msg === undefined) {
        continue;
      }
      if (isEvent(msg)) {
        await onEvent(msg);
        continue;
      }
      return checked(status, msg);
    }
  }
  const tail = lines.rest();
  if (tail.length > 0) {
    const msg = parseLine(tail, status);
    if (msg !== undefined && !isEvent(msg)) {
      return checked(status, msg);
    }
  }
  throw new InternalError(status, "internal", "the streamed exec ended before its result");
}

function parseLine(line: Buffer, status: number): unknown {
  const s = line.toString("utf8").trim();
  if (s === "") {
    return undefined;
  }
  try {
    return JSON.parse(s);
  } catch {
    throw new InternalError(status, "internal", `streamed line is not JSON: ${clip(s)}`);
  }
}

export interface JsonLinesTransportOptions {
  /** The child's environment (default: this process's). */
  env?: NodeJS.ProcessEnv;
  /** Bound on each call (default 900 s). */
  requestTimeoutMs?: number;
  /** Bound on one line read from jailcell (default 400 MiB). */
  maxLineBytes?: number;
  /** How long close() waits for jailcell to exit before killing it (default 30 s). */
  closeWaitMs?: number;
}

interface Pending {
  op: string;
  onEvent: OnEvent | undefined;
  // Events and the response in order: each waits for the one before.
  chain: Promise<unknown>;
  resolve: (r: WireResponse) => void;
  reject: (e: unknown) => void;
  failed: boolean;
}

/**
 * A `jailcell json` subprocess, spoken to in JSON lines. Requests run at
 * once on jailcell's side and answers are matched by id, so one transport
 * may be shared between sandboxes. Closing it closes jailcell's stdin:
 * jailcell answers what is running, closes the sessions it made and exits.
 * The child does not keep node's event loop alive while no call waits.
 *
 *     const t = new JsonLinesTransport(["jailcell", "json"]);
 */
export class JsonLinesTransport implements Transport {
  readonly description: string;
  readonly command: string[];
  readonly requestTimeoutMs: number;
  private readonly proc: ChildProcessWithoutNullStreams;
  private readonly closeWaitMs: number;
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private dead: JailcellError | undefined;
  private abandoned = false;
  private tail: Buffer[] = [];
  private tailLen = 0;
  private readonly exited: Promise<void>;

  constructor(command: string[] = ["jailcell", "json"], opts: JsonLinesTransportOptions = {}) {
    if (!Array.isArray(command) || command.length === 0 || command.some((a) => typeof a !== "string")) {
      throw badRequest("command must be a non-empty array of strings, e.g. [\"jailcell\", \"json\"]");
    }
    this.command = [...command];
    this.description = `JsonLinesTransport(${command.join(" ")})`;
    this.requestTimeoutMs = opts.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
    this.closeWaitMs = opts.closeWaitMs ?? 30_000;
    const max = opts.maxLineBytes ?? MAX_RESPONSE_BYTES;
    this.proc = spawn(command[0]!, command.slice(1), { env: opts.env ?? process.env, stdio: ["pipe", "pipe", "pipe"] });
    this.exited = new Promise((resolve) => this.proc.once("close", () => resolve()));
    this.proc.once("error", (e) => this.fail(`start ${command.join(" ")}: ${e.message}`));
    this.proc.once("close", (code, signal) => this.fail(`jailcell json exited (${signal ? "signal " + signal : "status " + code})`));
    this.proc.stdin.on("error", () => {}); // EPIPE after exit: reported by close
    this.proc.stderr.on("data", (chunk: Buffer) => {
      // The last 64 KiB of its log, quoted if it dies.
      this.tail.push(chunk);
      this.tailLen += chunk.length;
      while (this.tailLen > 64 << 10 && this.tail.length > 1) {
        this.tailLen -= this.tail.shift()!.length;
      }
    });
    const lines = new LineSplitter(max);
    this.proc.stdout.on("data", (chunk: Buffer) => {
      if (this.abandoned) {
        return; // drained, so jailcell is never blocked writing
      }
      let got: Buffer[];
      try {
        got = lines.push(chunk);
      } catch (e) {
        this.abandon(`jailcell json sent ${(e as Error).message}`);
        return;
      }
      for (const line of got) {
        this.line(line);
      }
    });
    this.unref();
  }

  /** The child's pid. */
  get pid(): number | undefined {
    return this.proc.pid;
  }

  /** The last 64 KiB jailcell wrote to its stderr. */
  stderrTail(): string {
    return Buffer.concat(this.tail).toString("utf8");
  }

  // A call in flight holds its own timer, which keeps the loop alive.
  private unref(): void {
    this.proc.unref();
    for (const s of [this.proc.stdin, this.proc.stdout, this.proc.stderr]) {
      (s as unknown as { unref?: () => void }).unref?.();
    }
  }

  private line(line: Buffer): void {
    const s = line.toString("utf8").trim();
    if (s === "") {
      return;
    }
    let msg: unknown;
    try {
      msg = JSON.parse(s);
    } catch {
      this.abandon(`jailcell json sent a line that is not JSON: ${clip(s)}`);
      return;
    }
    const id = msg !== null && typeof msg === "object" ? (msg as Record<string, unknown>)["id"] : undefined;
    if (typeof id !== "number") {
      return; // not an answer to us: our ids are integers
    }
    const p = this.pending.get(id);
    if (p === undefined || p.failed) {
      return;
    }
    if (isEvent(msg)) {
      const ev = msg;
      if (p.onEvent) {
        const cb = p.onEvent;
        p.chain = p.chain.then(() => (p.failed ? undefined : cb(ev)));
        p.chain.catch((e) => {
          p.failed = true;
          p.reject(e);
        });
      }
      return;
    }
    this.pending.delete(id);
    p.chain.then(
      () => {
        try {
          const resp = checked(0, msg);
          if (p.op === "download" && typeof resp["data"] === "string") {
            resp["data"] = new Uint8Array(Buffer.from(resp["data"] as string, "base64"));
          }
          p.resolve(resp);
        } catch (e) {
          p.reject(e);
        }
      },
      () => {}, // a callback failed: already rejected
    );
  }

  /**
   * Gives up on a child that broke the protocol: there is no way to find
   * the next line. Its stdin is closed, so it ends its sessions and exits
   * as on close() (a SIGKILL would leave its sandboxes behind); killed
   * only if it has not within closeWaitMs.
   */
  private abandon(why: string): void {
    this.abandoned = true;
    this.fail(why);
    this.proc.stdin.end();
    setTimeout(() => {
      if (this.proc.exitCode === null && this.proc.signalCode === null) {
        this.proc.kill("SIGKILL");
      }
    }, this.closeWaitMs).unref();
  }

  private fail(why: string): void {
    if (this.dead === undefined) {
      let msg = why;
      const tail = this.stderrTail().trim();
      if (tail !== "") {
        msg += "; its log ends: " + tail.slice(-2000);
      }
      this.dead = new UnavailableError(0, "unavailable", msg);
    }
    const err = this.dead;
    const pending = [...this.pending.values()];
    this.pending.clear();
    for (const p of pending) {
      p.failed = true;
      p.reject(err);
    }
  }

  async call(op: string, fields: Fields, opts: CallOptions = {}): Promise<WireResponse> {
    if (this.dead !== undefined) {
      throw this.dead;
    }
    const id = this.nextId++;
    const req = toWire(fields) as Record<string, unknown>;
    req["id"] = id;
    req["op"] = op;
    if (op === "exec" || (op === "command" && opts.onEvent)) {
      req["stream"] = true; // events are how output arrives in order
    }
    const line = JSON.stringify(req) + "\n";
    const deadline = new Deadline(`${op} (id ${id}) via ${this.description}`, opts.timeoutMs ?? this.requestTimeoutMs, opts.signal);
    const answer = new Promise<WireResponse>((resolve, reject) => {
      this.pending.set(id, { op, onEvent: opts.onEvent, chain: Promise.resolve(), resolve, reject, failed: false });
    });
    try {
      this.proc.stdin.write(line);
      return await Promise.race([answer, deadline.promise]);
    } catch (e) {
      answer.catch(() => {});
      throw e;
    } finally {
      deadline.clear();
      const p = this.pending.get(id);
      if (p !== undefined) {
        p.failed = true; // late events and the late answer are dropped
        this.pending.delete(id);
      }
    }
  }

  /**
   * Close jailcell's stdin and wait up to closeWaitMs for it to exit (it
   * closes its sessions first); then kill it.
   */
  async close(): Promise<void> {
    if (this.dead === undefined) {
      this.dead = new UnavailableError(0, "unavailable", "the transport is closed");
    }
    this.proc.stdin.end();
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) {
      return;
    }
    let timer: NodeJS.Timeout | undefined;
    const waited = await Promise.race([
      this.exited.then(() => true),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), this.closeWaitMs);
      }),
    ]);
    clearTimeout(timer);
    if (!waited) {
      this.proc.kill("SIGKILL");
      await this.exited;
    }
  }
}

export interface TransportChoice {
  /** The service's Unix socket (default $JAILCELL_SOCKET, else /run/jailcell/jailcell.sock). */
  socket?: string;
  /** The service's TCP listener (default $JAILCELL_URL when no socket or command is given). */
  url?: string;
  /** Bearer token for url (default $JAILCELL_TOKEN). */
  token?: string;
  /** TLS options for an https url. */
  tls?: https.RequestOptions;
  /** Start a private `jailcell json`, e.g. ["jailcell", "json"]. */
  command?: string[];
  /** Bound on each call (default 900 s). */
  requestTimeoutMs?: number;
}

/** The transport a Sandbox builds for itself (it then owns it). */
export function transportFor(c: TransportChoice): Transport {
  const given = (["socket", "url", "command"] as const).filter((k) => c[k] !== undefined);
  if (given.length > 1) {
    throw badRequest(`give one of socket, url or command, not ${given.join(" and ")}: socket is a \`jailcell serve\` Unix socket, url its TCP listener, command starts \`jailcell json\``);
  }
  const timeout = c.requestTimeoutMs !== undefined ? { requestTimeoutMs: c.requestTimeoutMs } : {};
  if (c.command !== undefined) {
    return new JsonLinesTransport(c.command, timeout);
  }
  const url = c.url ?? (c.socket === undefined ? process.env["JAILCELL_URL"] || undefined : undefined);
  if (url !== undefined) {
    const token = c.token ?? (process.env["JAILCELL_TOKEN"] || undefined);
    return new HttpTransport({ url, ...(token !== undefined ? { token } : {}), ...(c.tls ? { tls: c.tls } : {}), ...timeout });
  }
  return new HttpTransport({ socketPath: c.socket ?? (process.env["JAILCELL_SOCKET"] || DEFAULT_SOCKET), ...timeout });
}
