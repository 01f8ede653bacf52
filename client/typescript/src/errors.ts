/**
 * One error class per wire error code (docs/service.md, "Errors"; api/wire.go
 * and api/httpapi/http.go's httpStatus). A cell that raises is not an error of the
 * call: its exception is Execution.error. These are for what jailcell itself
 * refused or could not do, and for what this client refused before sending.
 */

/** The wire's error codes, and the HTTP status each is answered with. */
export const ERROR_STATUS = {
  bad_request: 400,
  forbidden: 403, // HTTP only; 401 on TCP without valid credentials
  not_found: 404,
  busy: 409,
  expired: 410,
  limit: 429, // 413 for a body over the transport's size limit
  internal: 500,
  unavailable: 503,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;

/**
 * An error answered by jailcell. code is the wire code (a newer server's
 * unknown code is kept as is), status the HTTP status (0 through
 * `jailcell json`, which has none, and for errors this client raised
 * itself), message the wire message, which names what was wrong.
 */
export class JailcellError extends Error {
  readonly code: string;
  readonly status: number;
  /** "lost" on a not_found for a session lost with its kernel. */
  readonly state: string | undefined;

  constructor(status: number, code: string, message: string, state?: string) {
    super(message);
    this.status = status;
    this.code = code;
    this.state = state;
    this.name = new.target.name;
  }
}

/** bad_request: the request is wrong; the message names the field. */
export class BadRequestError extends JailcellError {}
/** not_found: no such session (closed, expired, another user's) or file. */
export class NotFoundError extends JailcellError {}
/**
 * expired: the session reached its max_lifetime and was ended; its
 * variables and files are gone. A NotFoundError too.
 */
export class ExpiredError extends NotFoundError {}
/** limit: a configured ceiling (live sessions, sizes) was reached. */
export class LimitError extends JailcellError {}
/** busy: the session is running another cell (cells never queue). */
export class BusyError extends JailcellError {}
/**
 * unavailable: no sandbox could be built, the service is shutting down, or
 * the transport is gone (socket refused, `jailcell json` exited).
 */
export class UnavailableError extends JailcellError {}
/** internal: a bug in jailcell, or an answer this client cannot read. */
export class InternalError extends JailcellError {}
/**
 * forbidden: the caller's uid and groups may not use the socket, or (TCP)
 * the bearer token is missing or wrong (HTTP 401).
 */
export class ForbiddenError extends JailcellError {}
/**
 * The call got no answer within its request timeout (requestTimeoutMs), or
 * was aborted by its AbortSignal: raised by this client, code "timeout" or
 * "aborted", status 0. A cell's own time limit is not this: that cell's
 * Execution has status "timeout".
 */
export class TimeoutError extends JailcellError {}

const byCode: Record<string, new (status: number, code: string, message: string, state?: string) => JailcellError> = {
  bad_request: BadRequestError,
  not_found: NotFoundError,
  expired: ExpiredError,
  limit: LimitError,
  busy: BusyError,
  unavailable: UnavailableError,
  internal: InternalError,
  forbidden: ForbiddenError,
};

/**
 * The error for a wire error; an unknown code is a plain JailcellError that
 * keeps it, so a newer server's code is not lost.
 */
export function errorFor(status: number, code: string | undefined, message: string | undefined, state?: string): JailcellError {
  const c = code || "internal";
  const cls = byCode[c] ?? JailcellError;
  return new cls(status, c, message || "no error message", state);
}

/** A request this client refuses before sending it. */
export function badRequest(message: string): BadRequestError {
  return new BadRequestError(0, "bad_request", message);
}
