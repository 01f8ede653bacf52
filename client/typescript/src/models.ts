/**
 * What a cell produced, shaped like E2B's code-interpreter SDK (Execution,
 * Result, Logs, ExecutionError, OutputMessage) plus what jailcell adds: the
 * status decided on the host, the files the cell changed, what it cost, and
 * the fix-and-retry attempts. Everything here is built from a wire result.
 */

import { type ChartTypes, toChart } from "./charts.js";
import type {
  CellStatus,
  MimeBundle,
  SessionInfo,
  WireAttempt,
  WireCellError,
  WireDisplayItem,
  WireFallback,
  WireFrame,
  WireKnown,
  WireChart,
  WireResponse,
  WireUsage,
} from "./wire.js";

/**
 * text/plain as E2B's Result.text has it: one pair of enclosing quotes (a
 * str value's repr) removed, anything else as it is.
 */
export function unquoted(text: string): string {
  if (text.length >= 2 && text[0] === text[text.length - 1] && (text[0] === "'" || text[0] === '"')) {
    return text.slice(1, -1);
  }
  return text;
}

/** The MIME types a Result has a property for, as in E2B's Result. */
export const MIME_FIELDS = {
  "text/plain": "text",
  "text/html": "html",
  "text/markdown": "markdown",
  "image/svg+xml": "svg",
  "image/png": "png",
  "image/jpeg": "jpeg",
  "application/pdf": "pdf",
  "text/latex": "latex",
  "application/json": "json",
  "application/javascript": "javascript",
} as const;

type FieldName = (typeof MIME_FIELDS)[keyof typeof MIME_FIELDS];

/**
 * One rich output: a figure or an object passed to display(), or the value
 * of the cell's last expression (isMainResult). Images (png, jpeg) are
 * base64 strings, as E2B gives them; text formats are strings; json is the
 * decoded value. text is a str value without its repr's quotes (bar for
 * 'bar'), as E2B gives it; the wire's text/plain keeps them.
 */
export class Result {
  text?: string;
  html?: string;
  markdown?: string;
  svg?: string;
  png?: string;
  jpeg?: string;
  pdf?: string;
  latex?: string;
  json?: unknown;
  javascript?: string;
  /** Formats without a property, by MIME type. */
  extra: Record<string, unknown> = {};
  /** Text a magic sent to IPython's pager (%quickref, obj?): never part of stdout. */
  isPager = false;
  /** What a matplotlib figure plotted, beside its png (E2B's Result.chart); undefined for anything else. */
  chart?: ChartTypes;

  constructor(
    bundle: MimeBundle = {},
    readonly isMainResult = false,
    chart?: WireChart,
  ) {
    const c = toChart(chart);
    if (c !== undefined) this.chart = c;
    for (const [mime, data] of Object.entries(bundle)) {
      const name = (MIME_FIELDS as Record<string, FieldName>)[mime];
      if (name === undefined) {
        this.extra[mime] = data;
      } else if (name === "json") {
        this.json = data;
      } else if (typeof data === "string") {
        this[name] = data;
      } else {
        this.extra[mime] = data;
      }
    }
    if (this.text !== undefined) this.text = unquoted(this.text);
  }

  /** A wire display item: every format of its bundle, and its own mime/data. */
  static fromDisplay(item: WireDisplayItem): Result {
    const bundle: MimeBundle = { ...(item.bundle ?? {}) };
    if (typeof item.mime === "string" && !(item.mime in bundle)) {
      bundle[item.mime] = item.data;
    }
    const r = new Result(bundle, false, item.chart);
    r.isPager = item.pager === true;
    return r;
  }

  /** The formats this result has: property names, then extra MIME types. */
  formats(): string[] {
    const have: string[] = Object.values(MIME_FIELDS).filter((n) => this[n] !== undefined);
    if (this.chart !== undefined) have.push("chart");
    return [...have, ...Object.keys(this.extra)];
  }

  /** The PNG decoded, or undefined. */
  pngBytes(): Uint8Array | undefined {
    return this.png === undefined ? undefined : new Uint8Array(Buffer.from(this.png, "base64"));
  }

  toString(): string {
    return this.text ?? "";
  }
}

/** The cell's output in the chunks it was streamed in. */
export interface Logs {
  stdout: string[];
  stderr: string[];
}

/**
 * A chunk of output as it is printed, given to onStdout/onStderr: E2B's
 * OutputMessage. timestamp is nanoseconds since the epoch, taken when the
 * chunk arrived here (millisecond precision); String(msg) is the text.
 */
export class OutputMessage {
  constructor(
    readonly line: string,
    readonly timestamp: number,
    readonly error: boolean,
  ) {}

  toString(): string {
    return this.line;
  }
}

/**
 * The exception a cell raised: name (its type), value (its message) and the
 * formatted traceback of the cell's frames.
 */
export class ExecutionError {
  constructor(
    readonly name: string,
    readonly value: string,
    readonly traceback: string,
    readonly frames: WireFrame[] = [],
    /** A failed shell command's exit status (!cmd, %pip: name subprocess.CalledProcessError), negative for a signal; undefined otherwise. */
    readonly exitCode?: number,
  ) {}

  static from(e: WireCellError | undefined): ExecutionError | undefined {
    if (e === undefined || e === null || typeof e !== "object") {
      return undefined;
    }
    return new ExecutionError(
      String(e.type ?? ""),
      String(e.message ?? ""),
      String(e.traceback ?? ""),
      Array.isArray(e.frames) ? e.frames : [],
      Number.isInteger(e.exit_code) ? e.exit_code : undefined,
    );
  }

  toString(): string {
    return `${this.name}: ${this.value}`;
  }
}

/** A file the cell created, modified or deleted; data is its content for a one-shot cell. */
export interface FileChange {
  path: string;
  size: number;
  change: string;
  data?: Uint8Array;
  omitted: boolean;
}

/** One run of a fix-and-retry loop (docs/workflow.md). */
export interface Attempt {
  attempt: number;
  code: string;
  status: string;
  error?: ExecutionError;
  stdout: string;
  stderr: string;
}

/**
 * The outcome of runCode. status is decided on the host: ok, error (the
 * cell raised: see error), timeout, oom, killed, or skipped (failure
 * memory). results holds the cell's displays in order and last the value of
 * its last expression (isMainResult); text is that value's text/plain.
 */
export class Execution {
  results: Result[] = [];
  logs: Logs = { stdout: [], stderr: [] };
  error?: ExecutionError;
  executionCount?: number;
  status: CellStatus | "" = "";
  // jailcell's own.
  files: FileChange[] = [];
  usage?: WireUsage;
  state = "";
  stateReason = "";
  limits: string[] = [];
  stdoutTruncated = false;
  stderrTruncated = false;
  // Fix-and-retry: every run, the fallback when the loop failed, "degraded"
  // when the result came from a stateless rerun, the remembered failure
  // behind a "skipped" result.
  attempts: Attempt[] = [];
  fallback?: WireFallback;
  mode = "";
  known?: WireKnown;
  /** The wire response, as received. */
  raw: WireResponse = { ok: true };

  /** The text/plain of the last expression's value, or undefined. */
  get text(): string | undefined {
    return this.results.find((r) => r.isMainResult)?.text;
  }

  /** The chart of the last expression's value when it is a matplotlib Figure (the wire's value_chart). */
  get valueChart(): ChartTypes | undefined {
    return this.results.find((r) => r.isMainResult)?.chart;
  }

  get ok(): boolean {
    return this.status === "ok";
  }

  /**
   * An Execution from an exec response; stdout/stderr are the streamed
   * chunks (the result's whole text is used when none came).
   */
  static fromResponse(resp: WireResponse, stdout: string[] = [], stderr: string[] = []): Execution {
    const ex = new Execution();
    const res = resp.result;
    ex.raw = resp;
    if (res === undefined || res === null) {
      return ex;
    }
    ex.logs = {
      stdout: stdout.length > 0 ? [...stdout] : res.stdout ? [res.stdout] : [],
      stderr: stderr.length > 0 ? [...stderr] : res.stderr ? [res.stderr] : [],
    };
    ex.results = (res.display ?? []).filter((d) => d !== null && typeof d === "object").map((d) => Result.fromDisplay(d));
    if (res.value !== undefined && res.value !== null && Object.keys(res.value).length > 0) {
      ex.results.push(new Result(res.value, true, res.value_chart));
    }
    ex.error = ExecutionError.from(res.error);
    if (typeof res.execution_count === "number") {
      ex.executionCount = res.execution_count;
    }
    ex.status = res.status ?? "";
    ex.files = (res.files ?? []).map((f) => ({
      path: f.path,
      size: f.size,
      change: f.change,
      ...(typeof f.data === "string" ? { data: new Uint8Array(Buffer.from(f.data, "base64")) } : {}),
      omitted: f.omitted === true,
    }));
    ex.usage = res.usage;
    ex.state = res.state ?? "";
    ex.stateReason = res.state_reason ?? "";
    ex.limits = [...(res.limits ?? [])];
    ex.stdoutTruncated = res.stdout_truncated === true;
    ex.stderrTruncated = res.stderr_truncated === true;
    ex.attempts = (resp.attempts ?? []).map((a: WireAttempt) => {
      const err = ExecutionError.from(a.error);
      return { attempt: a.attempt, code: a.code, status: a.status, ...(err ? { error: err } : {}), stdout: a.stdout ?? "", stderr: a.stderr ?? "" };
    });
    if (resp.fallback) {
      ex.fallback = resp.fallback;
    }
    ex.mode = resp.mode ?? "";
    if (resp.known) {
      ex.known = resp.known;
    }
    return ex;
  }

  /**
   * The execution as a model should read it back from a tool call: status,
   * output, the value, the error's traceback, what figures were shown and
   * which files changed; cut to maxChars (its end is kept: that is where a
   * traceback ends).
   */
  toolText(maxChars = 8000): string {
    const parts = [`status: ${this.status}`];
    const out = this.logs.stdout.join("");
    const err = this.logs.stderr.join("");
    if (out) parts.push("stdout:\n" + out.replace(/\n+$/, ""));
    if (err) parts.push("stderr:\n" + err.replace(/\n+$/, ""));
    if (this.error) parts.push(`error: ${this.error}\n${this.error.traceback.replace(/\n+$/, "")}`);
    const shown = this.results.filter((r) => !r.isMainResult);
    if (shown.length > 0) parts.push("displayed: " + shown.map((r) => r.formats().join("/")).join(", "));
    if (this.text !== undefined) parts.push("value: " + this.text);
    if (this.files.length > 0) parts.push("files: " + this.files.map((f) => `${f.path} (${f.change})`).join(", "));
    if (this.limits.length > 0) parts.push("limits hit: " + this.limits.join(", "));
    let text = parts.join("\n");
    if (text.length > maxChars) {
      text = `[... ${text.length - maxChars} characters cut ...]\n` + text.slice(text.length - maxChars);
    }
    return text;
  }

  toJSON(): Record<string, unknown> {
    return {
      status: this.status,
      results: this.results,
      logs: this.logs,
      error: this.error,
      executionCount: this.executionCount,
      files: this.files.map((f) => ({ ...f, data: f.data ? Buffer.from(f.data).toString("base64") : undefined })),
      usage: this.usage,
      state: this.state,
      limits: this.limits,
    };
  }
}

/** A file or directory of the session's workspace. */
export interface EntryInfo {
  name: string;
  path: string;
  /** "symlink": the entry itself is a link; it is never followed. */
  type: "file" | "dir" | "symlink";
  size: number;
  /** Permission bits (0o777); 0 for a symlink. */
  mode: number;
  /** Go's FileMode text of the entry itself: "-rw-r--r--", "drwxr-xr-x", "Lrwxrwxrwx". */
  permissions: string;
  /** "root", "nobody" (an id the sandbox does not map), else the id's number. */
  owner: string;
  group: string;
  /** A symlink's target, absolute against the link's directory; untrusted (the sandbox wrote it). */
  symlinkTarget?: string;
  /** undefined if the server sent none or an unreadable one. */
  modifiedTime: Date | undefined;
  /**
   * The file's metadata (E2B's): what the last files.write gave it, or what
   * a program in the sandbox set in its user.e2b.* attributes (so
   * untrusted, though bounded as a write's); undefined if none.
   */
  metadata?: Record<string, string>;
}

/** What files.write returns. */
export interface WriteInfo {
  name: string;
  path: string;
  type: "file";
  size: number;
  /** The metadata the file was written with; undefined if none. */
  metadata?: Record<string, string>;
}

export type { SessionInfo };
