/**
 * The wire's types: what jailcell sends and takes (api/openapi.json,
 * docs/service.md). A deliberate hand-written copy: test/drift.ts compiles
 * them against the types openapi-typescript generates from api/openapi.json,
 * so a field added, removed or retyped there fails the client's tests.
 */

/** Every representation of an object, keyed by MIME type; binary types base64. */
export type MimeBundle = Record<string, unknown>;

/** One traceback frame of a cell's exception. */
export interface WireFrame {
  file: string;
  line: number;
  name: string;
  code?: string;
}

/** A Python exception a cell raised (or the host's verdict: Timeout, ...). */
export interface WireCellError {
  type: string;
  message: string;
  traceback: string;
  frames?: WireFrame[];
  /** A failed shell command's exit status (!cmd, %pip), negative for the signal that killed it. */
  exit_code?: number;
}

/** One series, bar, wedge, histogram or box of a chart; in a superchart, one subplot's chart. */
export interface WireChartElement {
  label?: string;
  group?: string;
  value?: number;
  points?: [number, number][];
  angle?: number;
  radius?: number;
  edges?: number[];
  counts?: number[];
  min?: number;
  first_quartile?: number;
  median?: number;
  third_quartile?: number;
  max?: number;
  outliers?: number[];
}

export type WireChartType = "line" | "scatter" | "bar" | "pie" | "histogram" | "box_and_whisker" | "superchart" | "unknown";

/** What a matplotlib figure plotted, beside its PNG (docs/notebook.md "Chart data beside each figure"). */
export interface WireChart {
  type: WireChartType;
  title: string;
  x_label?: string;
  y_label?: string;
  x_unit?: string;
  y_unit?: string;
  x_scale?: string;
  y_scale?: string;
  x_ticks?: number[];
  x_tick_labels?: string[];
  y_ticks?: number[];
  y_tick_labels?: string[];
  orientation?: "vertical" | "horizontal";
  stacked?: boolean;
  elements: WireChartElement[];
  truncated?: boolean;
  reason?: string;
}

/** A rich output: a figure, an object passed to display(), or pager text. */
export interface WireDisplayItem {
  mime: string;
  data: string;
  bundle?: MimeBundle;
  pager?: boolean;
  /** The figure's chart data (matplotlib figures only). */
  chart?: WireChart;
  /** A pandas DataFrame's columns, {name: [values]} in column order (at most 10000 cells). */
  table?: Record<string, Array<string | number | boolean | null>>;
}

/** A file a cell created, modified or deleted; one-shot cells return its data (base64). */
export interface WireFileChange {
  path: string;
  size: number;
  change: string;
  data?: string;
  omitted?: boolean;
}

export interface WireRefusedAttempt {
  addr?: string;
  port?: number;
  name?: string;
  reason: string;
  count: number;
}

export interface WireNetworkUsage {
  sent_bytes: number;
  received_bytes: number;
  refused_count: number;
  refused?: WireRefusedAttempt[];
}

/** What a cell cost, measured on the host. */
export interface WireUsage {
  wall_ms: number;
  cpu_ms: number;
  peak_memory_bytes: number;
  peak_memory_scope?: "cell" | "session";
  network?: WireNetworkUsage;
}

export type CellStatus = "ok" | "error" | "timeout" | "oom" | "killed" | "skipped";

/** The outcome of one cell. */
export interface WireResult {
  status: CellStatus;
  stdout: string;
  stderr: string;
  stdout_truncated: boolean;
  stderr_truncated: boolean;
  error?: WireCellError;
  value?: MimeBundle;
  /** The chart data of value when the value is a matplotlib Figure. */
  value_chart?: WireChart;
  /** value's columns when the value is a pandas DataFrame. */
  value_table?: Record<string, Array<string | number | boolean | null>>;
  display?: WireDisplayItem[];
  files?: WireFileChange[];
  usage: WireUsage;
  state?: "kept" | "lost";
  state_reason?: string;
  limits?: ("memory" | "pids" | "disk" | "output" | "time")[];
  execution_count?: number;
}

/** One run of a fix-and-retry loop (docs/workflow.md). */
export interface WireAttempt {
  attempt: number;
  code: string;
  status: string;
  error?: WireCellError;
  stdout?: string;
  stderr?: string;
}

export interface WireFallback {
  code: string;
  error: string;
  reason: string;
  tried: string[] | null;
}

/** A remembered failure behind a "skipped" result. */
export interface WireKnown {
  fingerprint: string;
  type: string;
  message: string;
  modules?: string[];
  count: number;
  last_seen: string;
  policy?: string;
  first_seen?: string;
  force?: string;
}

/** A session. */
export interface SessionInfo {
  session: string;
  state: "ready" | "busy" | "starting" | "hibernated" | "lost";
  policy: string;
  created_at: string;
  expires_at: string;
  cells: number;
  persist?: string;
  /** The start directory when it is not /work: /home/user. */
  cwd?: string;
  /** Hibernated at its idle TTL, not ended (expires_at is then when it hibernates). */
  hibernate_on_idle?: boolean;
  restored?: string[];
  survives?: string;
  installed?: string[];
  forked_from?: string;
  snapshot_at?: string;
  state_reason?: string;
  memory_bytes?: number;
  start?: "zygote" | "template" | "import";
  pooled?: boolean;
}

/** One file or directory of a session's workspace. */
export interface WireEntry {
  path: string;
  size: number;
  dir?: boolean;
  /** A symbolic link, never followed; link is its target as written in the sandbox. */
  symlink?: boolean;
  link?: string;
  /** Permission bits (st_mode & 0o7777); absent: 0, or not known (upload). */
  mode?: number;
  /** Owner and group as the sandbox sees them; absent: 0 (its root); 65534: an id it does not map. */
  uid?: number;
  gid?: number;
  mtime: string;
  /** The file's metadata; absent: none. */
  metadata?: Metadata;
}

/**
 * A file's metadata, kept in its user.e2b.* extended attributes (a program
 * in the sandbox may set them too): keys of 1 to 246 bytes, keys and values
 * printable ASCII, at most 4096 bytes in all counting 9 per key. An upload
 * replaces the file's metadata with its own; one without clears it.
 */
export type Metadata = Record<string, string>;

/** What a shell command run inside the sandbox did (op command). */
export interface WireCommandResult {
  job: string;
  pid?: number;
  /** exit_code is valid only when done. */
  done: boolean;
  /** Negative: the signal that ended it. */
  exit_code: number;
  stdout: string;
  stderr: string;
  stdout_truncated?: boolean;
  stderr_truncated?: boolean;
  timed_out?: boolean;
}

/** The host's view of a session's cgroup and disk (op metrics). */
export interface WireSessionMetrics {
  timestamp: string;
  cpu_used_pct: number;
  cpu_count: number;
  cpu_seconds: number;
  mem_used: number;
  mem_peak: number;
  mem_total: number;
  disk_used: number;
  disk_total: number;
  running: boolean;
}

/** A change a directory watch saw; name is relative to the watched directory and untrusted. */
export interface WireWatchEvent {
  name: string;
  type: "create" | "write" | "remove" | "rename";
}

/** The isolation features of the host (ping). */
export interface Features {
  kernel: string;
  cgroup_mode: string;
  controllers: string[] | null;
  swap_limit: boolean;
  user_namespace: boolean;
  overlay: boolean;
  idmapped_mounts: boolean;
  seccomp: boolean;
  seccomp_version?: string;
  problems?: string[];
}

export interface WireError {
  code: "bad_request" | "not_found" | "expired" | "limit" | "busy" | "unavailable" | "internal" | "forbidden";
  message: string;
  state?: "lost";
}

/**
 * A streamed piece of a cell's output, before its final response; a
 * clear_output event is IPython's clear_output() (wait: when the next
 * output comes, not now).
 */
export type WireEvent =
  | { id: string | number; event: "stdout" | "stderr"; text: string; display?: undefined; wait?: boolean }
  | { id: string | number; event: "display"; display: WireDisplayItem; text?: undefined; wait?: boolean }
  | { id: string | number; event: "clear_output"; wait?: boolean; text?: undefined; display?: undefined };

/** Environment variables for processes inside the sandbox: name to value. */
export type Envs = Record<string, string>;

/** Tightens a session's policy; an unknown key is refused by the server. */
export type Limits = Record<string, number | string | boolean | null>;

/** The fields of a create. */
export interface CreateFields {
  ttl_s?: number;
  max_lifetime_s?: number;
  policy?: string;
  limits?: Limits;
  persist?: string;
  /** The start directory: /work (default) or /home/user, the same workspace. */
  cwd?: string;
  requirements?: string[];
  envs?: Envs;
  /** Hibernate the session at its idle TTL instead of ending it (a host without checkpoint/restore refuses: unavailable). */
  hibernate_on_idle?: boolean;
}

/** The fields of an exec; files' data is bytes here, base64 on the wire. */
export interface ExecFields {
  code: string;
  session?: string;
  timeout_s?: number;
  snapshot?: boolean;
  files?: { path: string; data: Uint8Array }[];
  policy?: string;
  fix?: { max_attempts: number };
  force?: boolean;
  /** Keep ANSI escapes and "\r\n" in the cell's text (default: stripped, "\n"). */
  raw_ansi?: boolean;
  /** This cell's environment, put back after it. */
  envs?: Envs;
  /** A namespace of the kernel's own to run in (the E2B door's code contexts); absent: the main one. */
  context?: { id?: string; cwd?: string; reset?: boolean };
}

/** A terminal's size in character cells, rows and cols each 1 to 1000. */
export interface WirePtySize {
  rows: number;
  cols: number;
}

/**
 * The fields of a command: run one inside the sandbox, or wait for, kill,
 * write to the stdin of (input) or resize the terminal of a background one.
 */
export interface CommandFields {
  action?: "start" | "wait" | "kill" | "input" | "resize";
  cmd?: string;
  envs?: Envs;
  cwd?: string;
  timeout_s?: number;
  background?: boolean;
  job?: string;
  /** start: keep the command's stdin a pipe open for input (else /dev/null). */
  stdin?: boolean;
  /** start: run it in a new terminal of this size (all its output comes as stdout); resize: the new size. */
  pty?: WirePtySize;
  /** input: UTF-8 text for its stdin, at most 1 MiB a request. */
  input?: string;
  /** input: close its stdin after input (a pipe only). */
  eof?: boolean;
}

/** The fields of a set_timeout. */
export interface TimeoutFields {
  timeout_s: number;
}

/** The fields of a rename: what to move and its new path. */
export interface RenameFields {
  path: string;
  to: string;
}

/** The fields of a watch. */
export interface WatchFields {
  action?: "start" | "poll" | "stop";
  path?: string;
  recursive?: boolean;
  watch?: string;
}

/**
 * A successful response, every op's fields optional: each op fills its own
 * (create: the SessionInfo fields; exec: result...; download: data).
 */
export interface WireResponse extends Partial<SessionInfo> {
  id?: string | number | null;
  ok: true;
  // ping
  version?: string;
  isolation?: Features;
  // exec
  result?: WireResult;
  attempts?: WireAttempt[];
  fallback?: WireFallback;
  mode?: string;
  known?: WireKnown;
  // upload, download (data decoded to bytes by the transport)
  path?: string;
  size?: number;
  data?: Uint8Array;
  sha256?: string;
  /** upload: the file's metadata as written (absent: none). */
  metadata?: Metadata;
  // files, sessions
  files?: WireEntry[];
  sessions?: SessionInfo[];
  // interrupt
  interrupted?: boolean;
  // command
  command?: WireCommandResult;
  // metrics
  metrics?: WireSessionMetrics;
  // stat, rename
  entry?: WireEntry;
  // mkdir (path above)
  created?: boolean;
  // watch
  watch?: string;
  events?: WireWatchEvent[];
  overflow?: boolean;
  // complete, inspect, is_complete, and fields of ops newer than this client
  [field: string]: unknown;
}
