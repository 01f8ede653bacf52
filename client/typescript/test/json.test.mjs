// The Sandbox over `jailcell json` subprocesses: one shared by the cases,
// and one a Sandbox starts for itself and ends with kill().
import assert from "node:assert/strict";
import { after } from "node:test";

import * as jailcell from "../dist/index.js";
import { JsonLinesTransport, Result, Sandbox, UnavailableError } from "../dist/index.js";
import { cases, it, required } from "./cases.mjs";

const command = JSON.parse(required("JAILCELL_JSON_COMMAND"));
const shared = new JsonLinesTransport(command);
after(() => shared.close());

cases("jailcell json", () => ({ transport: shared }), { badRequestStatus: 0 });

it("gives a str value's text without its repr's quotes, as E2B's Result.text", () => {
  for (const [plain, want] of [["'bar'", "bar"], ['"it\'s"', "it's"], ["'", "'"], ["''", ""], ["42", "42"], ["('a', 'b')", "('a', 'b')"]]) {
    assert.equal(new Result({ "text/plain": plain }).text, want, plain);
  }
});

it("exports E2B's error names as jailcell's classes", () => {
  for (const [e2b, ours] of [["SandboxError", "JailcellError"], ["InvalidArgumentError", "BadRequestError"], ["NotFoundError", "NotFoundError"],
    ["FileNotFoundError", "NotFoundError"], ["SandboxNotFoundError", "NotFoundError"], ["AuthenticationError", "ForbiddenError"], ["TimeoutError", "TimeoutError"]]) {
    assert.ok(jailcell[e2b] !== undefined && jailcell[e2b] === jailcell[ours], e2b);
  }
  assert.ok(jailcell.errorFor(404, "not_found", "no such file") instanceof jailcell.FileNotFoundError);
});

it("starts a private jailcell json for one sandbox and ends it with kill", async () => {
  const sbx = await Sandbox.create({ command });
  assert.equal((await sbx.runCode("6 * 7")).text, "42");
  const t = sbx.transport;
  assert.equal(await sbx.kill(), true);
  await assert.rejects(t.call("ping", {}), (e) => e instanceof UnavailableError && /closed/.test(e.message));
});

it("bounds a line from jailcell json: over maxLineBytes, the process is ended", async () => {
  const t = new JsonLinesTransport(command, { maxLineBytes: 4096 });
  const sbx = await Sandbox.create({ transport: t });
  await assert.rejects(sbx.runCode("print('x' * 10000)"), (e) => e instanceof UnavailableError && /over 4096 bytes/.test(e.message));
  await assert.rejects(t.call("ping", {}), UnavailableError);
  await t.close();
});

it("names a command it could not start", async () => {
  const t = new JsonLinesTransport(["/nonexistent/jailcell", "json"]);
  await assert.rejects(t.call("ping", {}), (e) => e instanceof UnavailableError && /\/nonexistent\/jailcell/.test(e.message) && /ENOENT/.test(e.message));
  await t.close();
});

it("says why the process is gone, with its log", async () => {
  const t = new JsonLinesTransport(["sh", "-c", "echo 'jailcell: no state dir' >&2; exit 3"]);
  await assert.rejects(t.call("ping", {}), (e) => e instanceof UnavailableError && /status 3/.test(e.message) && /no state dir/.test(e.message));
  await t.close();
});
