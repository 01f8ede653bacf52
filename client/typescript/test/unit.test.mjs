// Tests that need no jailcell: a local HTTP server or a fake transport
// stands in for it. Run with `node --test test/unit.test.mjs` after the
// build.
import assert from "node:assert/strict";
import * as http from "node:http";
import { after, before, it } from "node:test";
import util from "node:util";

import { DEFAULT_REQUEST_TIMEOUT_MS, HttpTransport, JsonLinesTransport, Sandbox } from "../dist/index.js";

const TOKEN = "SECRET-bearer-token-0123456789abcdef";
const KEY = "-----BEGIN PRIVATE KEY-----SECRET-KEY-MATERIAL";
const PASSWORD = "SECRET-url-password";

// Answers every request as a create would, and records the credentials
// it was sent.
let server;
let url;
const authorizations = [];
before(async () => {
  server = http.createServer((req, res) => {
    authorizations.push(req.headers["authorization"]);
    req.resume();
    res.setHeader("content-type", "application/json");
    res.end(JSON.stringify({ ok: true, session: "s1", state: "ready", policy: "default" }));
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${server.address().port}`;
});
after(() => server.close());

/** Every way a caller might print or serialise v. */
function printed(v) {
  return [
    util.inspect(v, { depth: 9 }),
    util.inspect(v, { depth: 9, showHidden: true, getters: true }),
    util.format("%o", v),
    JSON.stringify(v),
  ];
}

it("prints a sandbox and its transport without the bearer token, TLS key or URL password", async () => {
  const sbx = await Sandbox.create({ url, token: TOKEN, tls: { key: KEY } });
  assert.deepEqual(authorizations, [`Bearer ${TOKEN}`], "the token must still be sent");
  const texts = [util.inspect(sbx, { depth: 9 }), util.inspect(sbx, { depth: 9, showHidden: true }), ...printed(sbx.transport)];
  const withPassword = new HttpTransport({ url: `https://user:${PASSWORD}@127.0.0.1:1/prefix`, token: TOKEN, tls: { key: KEY } });
  texts.push(...printed(withPassword));
  for (const text of texts) {
    assert.ok(!text.includes("SECRET"), `a secret is printed:\n${text}`);
  }
  assert.match(util.inspect(sbx.transport), /127\.0\.0\.1/, "the transport still says where it goes");
});

/** A transport that answers every op and records each exec's and command's bound. */
function recorder(requestTimeoutMs) {
  const t = {
    description: "recorder",
    bounds: [],
    async call(op, _fields, opts) {
      if (op === "create") return { ok: true, session: "s1", state: "ready", policy: "default" };
      t.bounds.push(opts?.timeoutMs);
      if (op === "command") return { ok: true, command: { exit_code: 0, stdout: "", stderr: "" } };
      return { ok: true, result: { status: "ok" } };
    },
    async close() {},
  };
  if (requestTimeoutMs !== undefined) t.requestTimeoutMs = requestTimeoutMs;
  return t;
}

it("gives a call for a long cell its time and a minute more, never less than the transport's own bound", async () => {
  const t = recorder(2_000_000);
  const sbx = await Sandbox.create({ transport: t });
  await sbx.runCode("x = 1", { timeoutMs: 10_000 });
  await sbx.runCode("x = 1", { timeoutMs: 3_000_000 });
  await sbx.runCode("x = 1", { timeoutMs: 3_000_000, requestTimeoutMs: 5_000 });
  await sbx.runCode("x = 1");
  await sbx.commands.run("true", { timeoutMs: 10_000 });
  await Sandbox.runOnce("x = 1", { transport: t, timeoutMs: 10_000 });
  assert.deepEqual(t.bounds, [2_000_000, 3_060_000, 5_000, undefined, 2_000_000, 2_000_000]);

  const plain = recorder(undefined); // a transport that does not say: the default is assumed
  await (await Sandbox.create({ transport: plain })).runCode("x = 1", { timeoutMs: 10_000 });
  assert.deepEqual(plain.bounds, [DEFAULT_REQUEST_TIMEOUT_MS]);
});

it("says its own request bound, as configured", async () => {
  assert.equal(new HttpTransport({ socketPath: "/nonexistent", requestTimeoutMs: 2_000_000 }).requestTimeoutMs, 2_000_000);
  assert.equal(new HttpTransport({ socketPath: "/nonexistent" }).requestTimeoutMs, DEFAULT_REQUEST_TIMEOUT_MS);
  const sbx = await Sandbox.create({ url, requestTimeoutMs: 2_000_000 });
  assert.equal(sbx.transport.requestTimeoutMs, 2_000_000);
  const j = new JsonLinesTransport(["true"], { requestTimeoutMs: 1_234 });
  assert.equal(j.requestTimeoutMs, 1_234);
  await j.close();
});
