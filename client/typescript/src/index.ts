/**
 * @jailcell/client: Python cells in OS-isolated jailcell sandboxes, from
 * TypeScript. ESM, Node 18.18+, no runtime dependencies.
 */

export { Sandbox, Files } from "./sandbox.js";
export type { Data, OutputHandler, ResultHandler, ErrorHandler, RunCodeOpts, SandboxOpts } from "./sandbox.js";
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
  ForbiddenError,
  InternalError,
  JailcellError,
  LimitError,
  NotFoundError,
  TimeoutError,
  UnavailableError,
  errorFor,
} from "./errors.js";
export type { ErrorCode } from "./errors.js";
export type * from "./wire.js";
