// The Sandbox over the service's Unix socket (HTTP/1.1 on AF_UNIX).
import assert from "node:assert/strict";

import { BadRequestError, BusyError, HttpTransport, InternalError, JsonLinesTransport, Sandbox, TimeoutError, UnavailableError } from "../dist/index.js";
import { cases, it, required } from "./cases.mjs";

const socket = required("JAILCELL_SOCKET");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// fn, again while the session is busy: a call given up on closes its
// connection, and the service then interrupts its cell, which takes a
// moment.
async function whenFree(fn) {
  for (;;) {
    try {
      return await fn();
    } catch (e) {
      if (!(e instanceof BusyError)) throw e;
      await sleep(50);
    }
  }
}

cases("unix socket", () => ({ socket }), { badRequestStatus: 400 }, (sandbox) => {
  // Once, here: a checkpoint is the slowest step of all (criu).
  it("hibernates and resumes with the kernel's variables", async () => {
    const sbx = await sandbox();
    await sbx.runCode("import numpy as np\nz = np.arange(5)");
    assert.equal((await sbx.hibernate()).state, "hibernated");
    assert.equal((await sbx.resume()).state, "ready");
    assert.equal((await sbx.runCode("int(z.sum())")).text, "10");
  });

  it("pauses at its timeout with E2B's lifecycle onTimeout 'pause', its variables kept", async () => {
    const sbx = await sandbox({ ttlMs: undefined, timeoutMs: 1_000, lifecycle: { onTimeout: "pause" } });
    assert.equal(sbx.info.hibernate_on_idle, true);
    await sbx.runCode("x = 41");
    // getInfo does not renew the timeout: polling it waits for the sweep.
    const end = Date.now() + 30_000;
    let info;
    while ((info = await sbx.getInfo()).state !== "paused") {
      assert.ok(Date.now() < end, `not paused 30 s past its 1 s timeout: ${JSON.stringify(info)}`);
      await sleep(100);
    }
    assert.equal(info.jailcellState, "hibernated");
    assert.deepEqual(info.lifecycle, { onTimeout: "pause", autoResume: true });
    assert.equal(sbx.info.hibernate_on_idle, true);
    assert.equal((await sbx.runCode("x + 1")).text, "42");
  });

  it("gives up on a call past requestTimeoutMs or its abort signal", async () => {
    const sbx = await sandbox();
    // The abandoned cell is interrupted by the service when the
    // connection closes, or runs on if it had not started: interrupt until
    // the session takes cells again (an interrupt that comes before the
    // kernel started the cell does not stop it).
    const settle = async () => {
      for (;;) {
        await sbx.interrupt();
        await sleep(100);
        try {
          const ex = await sbx.runCode("'after'");
          if (ex.error?.name !== "KeyboardInterrupt") return ex;
        } catch (e) {
          if (!(e instanceof BusyError)) throw e;
        }
      }
    };
    await assert.rejects(sbx.runCode("import time\ntime.sleep(600)", { requestTimeoutMs: 300 }), (e) => {
      assert.ok(e instanceof TimeoutError, String(e));
      assert.equal(e.code, "timeout");
      assert.match(e.message, /300 ms/);
      return true;
    });
    assert.equal((await settle()).text, "after");
    const ac = new AbortController();
    const running = sbx.runCode("import time\nprint('go', flush=True)\ntime.sleep(600)", { signal: ac.signal, onStdout: () => ac.abort() });
    await assert.rejects(running, (e) => e instanceof TimeoutError && e.code === "aborted");
    assert.equal((await settle()).text, "after");
  });

  it("passes a callback's own error to the caller as it is", async () => {
    const sbx = await sandbox();
    await sbx.runCode("kept = 1");
    const boom = new Error("callback failed");
    const cell = "print('x', flush=True)\nimport time\ntime.sleep(0.5)";
    await assert.rejects(sbx.runCode(cell, { onStdout: () => { throw boom; } }), (e) => e === boom);
    // Giving up closed the connection: the service interrupts the cell,
    // its variables kept.
    assert.equal((await whenFree(() => sbx.runCode("kept"))).text, "1");
  });

  it("bounds what it reads: a response over maxResponseBytes is refused", async () => {
    const small = new HttpTransport({ socketPath: socket, maxResponseBytes: 4096 });
    const sbx = await sandbox({ transport: small, socket: undefined });
    await assert.rejects(sbx.runCode("print('x' * 10000)"), (e) => e instanceof InternalError && /over 4096 bytes/.test(e.message));
    assert.equal((await whenFree(() => sbx.runCode("'small'"))).text, "small");
  });
});

it("takes E2B's lifecycle: kill is the default, pause keeps memory; what jailcell cannot do is refused by name", async () => {
  for (const [lifecycle, pause] of [[{ onTimeout: "kill" }, false], [{ onTimeout: { action: "kill" } }, false], [{ onTimeout: { action: "pause", keepMemory: true }, autoResume: true }, true]]) {
    const sbx = await Sandbox.create({ socket, lifecycle });
    try {
      assert.equal(sbx.info.hibernate_on_idle === true, pause, JSON.stringify(lifecycle));
      assert.deepEqual((await sbx.getInfo()).lifecycle, { onTimeout: pause ? "pause" : "kill", autoResume: pause });
    } finally {
      await sbx.kill();
    }
  }
  // Refused before anything is sent: the socket is never reached.
  const nowhere = socket + ".missing";
  for (const [opts, message] of [
    [{ lifecycle: { onTimeout: "hibernate" } }, /lifecycle\.onTimeout = "hibernate": allowed "kill" .*"pause"/],
    [{ lifecycle: {} }, /lifecycle\.onTimeout = undefined: allowed "kill"/],
    [{ lifecycle: { onTimeout: { action: "pause", keepMemory: false } } }, /keepMemory = false: jailcell pauses a sandbox with its memory/],
    [{ lifecycle: { onTimeout: { action: "kill", keepMemory: true } } }, /keepMemory goes with action "pause" only, not "kill"/],
    [{ lifecycle: { onTimeout: "kill", autoResume: true } }, /autoResume: true needs onTimeout "pause"/],
    [{ lifecycle: "pause" }, /lifecycle = "pause": must be an object/],
    [{ lifecycle: { onTimeout: "pause" }, hibernateOnIdle: true }, /give hibernateOnIdle or lifecycle/],
    [{ hibernateOnIdle: "yes" }, /hibernateOnIdle = "yes": must be a boolean/],
  ]) {
    await assert.rejects(Sandbox.create({ socket: nowhere, ...opts }), (e) => e instanceof BadRequestError && message.test(e.message), JSON.stringify(opts));
  }
});

it("refuses hibernateOnIdle a server ignores, closing the session it made", async () => {
  const calls = [];
  // A server older than hibernate_on_idle: it drops the field it does not know.
  const old = {
    description: "old server",
    close: async () => {},
    call: async (op, fields) => {
      calls.push([op, fields.hibernate_on_idle, fields.session]);
      return { ok: true, session: "n-0123", state: "ready", policy: "default", created_at: "", expires_at: "", cells: 0 };
    },
  };
  await assert.rejects(Sandbox.create({ transport: old, hibernateOnIdle: true }), (e) => e instanceof UnavailableError && /ignored hibernate_on_idle/.test(e.message));
  assert.deepEqual(calls, [["create", true, undefined], ["close", undefined, "n-0123"]]);
  calls.length = 0;
  assert.equal((await Sandbox.create({ transport: old, hibernateOnIdle: false })).sandboxId, "n-0123");
  assert.deepEqual(calls, [["create", undefined, undefined]]);
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
