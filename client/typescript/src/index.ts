/**
 * @jailcell/client: Python cells in OS-isolated jailcell sandboxes, from
 * TypeScript. ESM, Node 18.18+, no runtime dependencies.
 */

export { Sandbox, Files, FilesystemEventType, WatchHandle } from "./sandbox.js";
export type {
  ClearOutputHandler,
  ConnectOpts,
  Data,
  OutputHandler,
  ResultHandler,
  ErrorHandler,
  FilesystemEvent,
  RunCodeOpts,
  SandboxInfo,
  SandboxLifecycle,
  SandboxMetrics,
  SandboxOpts,
  WatchOpts,
  WriteOpts,
} from "./sandbox.js";
export { CommandExitError, CommandHandle, Commands, DEFAULT_COMMAND_TIMEOUT_MS, Pty } from "./commands.js";
export type { CommandOutputHandler, CommandRequestOpts, CommandResult, CommandStartOpts, PtyCreateOpts } from "./commands.js";
export { ChartType, ScaleType } from "./charts.js";
export type {
  BarChart,
  BarData,
  BoxAndWhiskerChart,
  BoxAndWhiskerData,
  Chart,
  Chart2D,
  ChartTypes,
  HistogramChart,
  HistogramData,
  LineChart,
  PieChart,
  PieData,
  PointChart,
  PointData,
  ScatterChart,
  SuperChart,
  UnknownChart,
} from "./charts.js";
export { Execution, ExecutionError, OutputMessage, Result, MIME_FIELDS } from "./models.js";
export type { Attempt, EntryInfo, FileChange, Logs, WriteInfo } from "./models.js";
export {
  DEFAULT_REQUEST_TIMEOUT_MS,
  DEFAULT_SOCKET,
  HttpTransport,
  JsonLinesTransport,
  MAX_RESPONSE_BYTES,
  transportFor,
} from "./transport.js";
export type { CallOptions, Fields, HttpTransportOptions, JsonLinesTransportOptions, OnEvent, Transport, TransportChoice } from "./transport.js";
export {
  BadRequestError,
  BusyError,
  ERROR_STATUS,
  ExpiredError,
  ForbiddenError,
  InternalError,
  JailcellError,
  LimitError,
  NotFoundError,
  TimeoutError,
  UnavailableError,
  errorFor,
} from "./errors.js";
// E2B's names for the same failures, so that `instanceof NotFoundError` or
// `instanceof SandboxError` written for E2B's SDK sees what jailcell
// throws: the classes above, not subclasses. A missing file and a missing
// sandbox are both NotFoundError here.
export {
  JailcellError as SandboxError,
  BadRequestError as InvalidArgumentError,
  NotFoundError as FileNotFoundError,
  NotFoundError as SandboxNotFoundError,
  ForbiddenError as AuthenticationError,
} from "./errors.js";
export type { ErrorCode } from "./errors.js";
export type * from "./wire.js";
