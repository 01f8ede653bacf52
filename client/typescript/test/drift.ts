// Compile-time guard on src/wire.ts, the client's hand-written copy of the
// wire types: test/tsclient generates schema.d.ts from api/openapi.json
// with openapi-typescript beside this file and compiles it (tsc -p
// test/tsconfig.json). Each check fails, naming the fields, when the
// document and the client disagree on which fields a type has, or when a
// value the document allows does not fit the client's type.

import type { components } from "./schema.js";
import type * as W from "../src/wire.js";
import type { ERROR_STATUS } from "../src/errors.js";

type S = components["schemas"];

/** true, or an object naming the fields only one side has. */
type SameKeys<Doc, Client> = [Exclude<keyof Doc, keyof Client>, Exclude<keyof Client, keyof Doc>] extends [never, never]
  ? true
  : { onlyInOpenAPI: Exclude<keyof Doc, keyof Client>; onlyInClient: Exclude<keyof Client, keyof Doc> };

/** true when every value the document allows is a value of the client's type. */
type Fits<Doc, Client> = [Doc] extends [Client] ? true : { doesNotFit: Doc; into: Client };

function check<T extends true>(): T | undefined {
  return undefined;
}

// What the server sends: the same fields, and every documented value fits.
check<SameKeys<S["Result"], W.WireResult>>();
check<Fits<S["Result"], W.WireResult>>();
check<SameKeys<S["CellError"], W.WireCellError>>();
check<Fits<S["CellError"], W.WireCellError>>();
check<SameKeys<S["Frame"], W.WireFrame>>();
check<Fits<S["Frame"], W.WireFrame>>();
check<SameKeys<S["DisplayItem"], W.WireDisplayItem>>();
check<Fits<S["DisplayItem"], W.WireDisplayItem>>();
check<SameKeys<S["FileChange"], W.WireFileChange>>();
check<Fits<S["FileChange"], W.WireFileChange>>();
check<SameKeys<S["Usage"], W.WireUsage>>();
check<Fits<S["Usage"], W.WireUsage>>();
check<SameKeys<S["NetworkUsage"], W.WireNetworkUsage>>();
check<Fits<S["NetworkUsage"], W.WireNetworkUsage>>();
check<SameKeys<S["RefusedAttempt"], W.WireRefusedAttempt>>();
check<Fits<S["RefusedAttempt"], W.WireRefusedAttempt>>();
check<SameKeys<S["Attempt"], W.WireAttempt>>();
check<Fits<S["Attempt"], W.WireAttempt>>();
check<SameKeys<S["Fallback"], W.WireFallback>>();
check<Fits<S["Fallback"], W.WireFallback>>();
check<SameKeys<S["Known"], W.WireKnown>>();
check<Fits<S["Known"], W.WireKnown>>();
check<SameKeys<S["SessionInfo"], W.SessionInfo>>();
check<Fits<S["SessionInfo"], W.SessionInfo>>();
check<SameKeys<S["Entry"], W.WireEntry>>();
check<Fits<S["Entry"], W.WireEntry>>();
check<SameKeys<S["Features"], W.Features>>();
check<Fits<S["Features"], W.Features>>();
check<SameKeys<S["Error"], W.WireError>>();
check<Fits<S["Error"], W.WireError>>();
check<SameKeys<S["Chart"], W.WireChart>>();
check<Fits<S["Chart"], W.WireChart>>();
check<SameKeys<S["ChartElement"], W.WireChartElement>>();
check<Fits<S["ChartElement"], W.WireChartElement>>();
check<Fits<S["Event"], W.WireEvent>>();
check<Fits<S["Envs"], W.Envs>>();
check<Fits<S["MimeBundle"], W.MimeBundle>>();
check<Fits<S["Limits"], W.Limits>>();
// Responses: every field of each op's response is one the client reads.
check<SameKeys<Omit<S["ExecResponse"], "id" | "ok">, Pick<W.WireResponse, "result" | "attempts" | "fallback" | "mode" | "known">>>();
check<SameKeys<Omit<S["PingResponse"], "id" | "ok">, Pick<W.WireResponse, "version" | "isolation">>>();
check<SameKeys<Omit<S["SessionResponse"], "id" | "ok">, W.SessionInfo>>();
check<SameKeys<Omit<S["InterruptResponse"], "id" | "ok">, Pick<W.WireResponse, "interrupted">>>();
check<SameKeys<Omit<S["UploadResponse"], "id" | "ok">, Pick<W.WireResponse, "path" | "size" | "metadata">>>();
check<Fits<Omit<S["UploadResponse"], "id" | "ok">, Pick<W.WireResponse, "path" | "size" | "metadata">>>();
check<Fits<S["Metadata"], W.Metadata>>();
check<SameKeys<S["CommandResult"], W.WireCommandResult>>();
check<Fits<S["CommandResult"], W.WireCommandResult>>();
check<SameKeys<S["SessionMetrics"], W.WireSessionMetrics>>();
check<Fits<S["SessionMetrics"], W.WireSessionMetrics>>();
check<SameKeys<S["WatchEvent"], W.WireWatchEvent>>();
check<Fits<S["WatchEvent"], W.WireWatchEvent>>();
check<SameKeys<Omit<S["CommandResponse"], "id" | "ok">, Pick<W.WireResponse, "command">>>();
check<SameKeys<Omit<S["MetricsResponse"], "id" | "ok">, Pick<W.WireResponse, "metrics">>>();
check<SameKeys<Omit<S["StatResponse"], "id" | "ok">, Pick<W.WireResponse, "entry">>>();
check<SameKeys<Omit<S["RemoveResponse"], "id" | "ok">, Pick<W.WireResponse, "path">>>();
check<SameKeys<Omit<S["MkdirResponse"], "id" | "ok">, Pick<W.WireResponse, "path" | "created">>>();
check<SameKeys<Omit<S["WatchResponse"], "id" | "ok">, Pick<W.WireResponse, "watch" | "events" | "overflow">>>();
check<Fits<Omit<S["CommandResponse"], "id" | "ok">, Pick<W.WireResponse, "command">>>();
check<Fits<Omit<S["MetricsResponse"], "id" | "ok">, Pick<W.WireResponse, "metrics">>>();
check<Fits<Omit<S["StatResponse"], "id" | "ok">, Pick<W.WireResponse, "entry">>>();
check<Fits<Omit<S["MkdirResponse"], "id" | "ok">, Pick<W.WireResponse, "path" | "created">>>();
check<Fits<Omit<S["WatchResponse"], "id" | "ok">, Pick<W.WireResponse, "watch" | "events" | "overflow">>>();
// What the client sends: the same fields (the session is in the URL; data
// is bytes here, base64 on the wire; stream is the transport's).
check<SameKeys<Omit<S["CreateRequest"], "id">, W.CreateFields>>();
check<SameKeys<Omit<S["ExecRequest"], "id" | "stream">, Omit<W.ExecFields, "session">>>();
check<SameKeys<Omit<S["CommandRequest"], "id" | "stream">, W.CommandFields>>();
check<Fits<Omit<S["CommandRequest"], "id" | "stream">, W.CommandFields>>();
check<SameKeys<S["PTYSize"], W.WirePtySize>>();
check<Fits<S["PTYSize"], W.WirePtySize>>();
check<SameKeys<Omit<S["TimeoutRequest"], "id">, W.TimeoutFields>>();
check<SameKeys<Omit<S["WatchRequest"], "id">, W.WatchFields>>();
check<SameKeys<Omit<S["RenameRequest"], "id">, W.RenameFields>>();
check<Fits<Omit<S["RenameRequest"], "id">, W.RenameFields>>();
check<Fits<Omit<S["WatchRequest"], "id">, W.WatchFields>>();
// Error classes: one per documented wire code, no more, no fewer.
check<SameKeys<Record<S["Error"]["code"], 0>, typeof ERROR_STATUS>>();
