// The Sandbox over the service's Unix socket (HTTP/1.1 on AF_UNIX).
import assert from "node:assert/strict";
import { it } from "node:test";

import { HttpTransport, Sandbox, UnavailableError } from "../dist/index.js";
import { cases, required } from "./cases.mjs";

const socket = required("JAILCELL_SOCKET");

cases("unix socket", () => ({ socket }), { badRequestStatus: 400 }, (sandbox) => {
  // Once, here: a checkpoint is the slowest step of all (criu).
  it("hibernates and resumes with the kernel's variables", async () => {
    const sbx = await sandbox();
    await sbx.runCode("import numpy as np\nz = np.arange(5)");
    assert.equal((await sbx.hibernate()).state, "hibernated");
    assert.equal((await sbx.resume()).state, "ready");
    assert.equal((await sbx.runCode("int(z.sum())")).text, "10");
  });
});

it("names the socket it could not reach", async () => {
  const missing = socket + ".missing";
  await assert.rejects(Sandbox.create({ socket: missing }), (e) => e instanceof UnavailableError && e.message.includes(missing));
});

it("finds the socket in $JAILCELL_SOCKET", async () => {
  const t = new HttpTransport();
  assert.equal(t.description, `HttpTransport(unix:${socket})`);
  const ping = await t.call("ping", {});
  assert.equal(typeof ping.version, "string");
  assert.equal(typeof ping.isolation.seccomp, "boolean");
});
