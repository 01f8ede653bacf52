// The cases every transport runs: run by unix.test.mjs (the service's Unix
// socket), tcp.test.mjs (its TCP listener with a bearer token) and
// json.test.mjs (`jailcell json` subprocesses), against the built package
// (dist/), as a user gets it. test/tsclient/tsclient_test.go builds it with
// the pinned typescript and starts the real service these talk to.

import assert from "node:assert/strict";
import { afterEach, describe, it as nodeIt } from "node:test";

// A test that waits on a callback that never comes fails within a minute
// instead of holding the run (node's default is no timeout).
export const it = (name, fn) => nodeIt(name, { timeout: 60_000 }, fn);

import {
  BadRequestError,
  BusyError,
  ChartType,
  CommandExitError,
  CommandHandle,
  FilesystemEventType,
  Execution,
  ExecutionError,
  JailcellError,
  NotFoundError,
  OutputMessage,
  Result,
  Sandbox,
  ScaleType,
  WatchHandle,
} from "../dist/index.js";

export const PNG_MAGIC = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
// A session id: the node.id, "-", 128 random bits.
export const SESSION_ID = /^[a-z0-9]{1,16}-[0-9a-f]{32}$/;

const FIGURE =
  "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n" +
  "plt.plot([1, 2, 3], [1, 4, 9])\nplt.show()\n";

/**
 * cases registers the suite; opts() gives the Sandbox.create options that
 * pick the transport; badRequestStatus is the HTTP status a bad_request
 * carries through it (0 over JSON lines); more(sandbox) adds a
 * transport's own cases, with the suite's sandbox maker.
 */
export function cases(name, opts, { badRequestStatus }, more = () => {}) {
  describe(name, () => {
    const live = [];
    const sandbox = async (extra = {}) => {
      const sbx = await Sandbox.create({ ...opts(), ttlMs: 120_000, ...extra });
      live.push(sbx);
      return sbx;
    };
    // Each test's sandboxes end with it: the service's session cap is shared.
    afterEach(async () => {
      for (const s of live.splice(0)) await s.kill().catch(() => {});
    });

    it("keeps state across cells", async () => {
      const sbx = await sandbox();
      assert.match(sbx.sandboxId, SESSION_ID);
      assert.equal(sbx.id, sbx.sandboxId);
      let ex = await sbx.runCode("x = 41");
      assert.ok(ex instanceof Execution);
      assert.deepEqual([ex.status, ex.error, ex.text, ex.results], ["ok", undefined, undefined, []]);
      ex = await sbx.runCode("x + 1");
      assert.equal(ex.text, "42");
      assert.equal(ex.results.at(-1).isMainResult, true);
      assert.deepEqual(ex.results.at(-1).formats(), ["text"]);
      assert.equal(ex.state, "kept");
      assert.equal(ex.executionCount, 2);
      assert.equal(typeof ex.usage.wall_ms, "number");
      assert.equal(await sbx.isRunning(), true);
    });

    it("gives an error's name, value and traceback, state kept", async () => {
      const sbx = await sandbox();
      const seen = [];
      const ex = await sbx.runCode("def f():\n    return 1/0\nf()", { onError: (e) => seen.push(e) });
      assert.equal(ex.status, "error");
      assert.ok(ex.error instanceof ExecutionError);
      assert.deepEqual([ex.error.name, ex.error.value], ["ZeroDivisionError", "division by zero"]);
      assert.match(ex.error.traceback, /return 1\/0/);
      assert.match(ex.error.traceback.trimEnd(), /ZeroDivisionError: division by zero$/);
      assert.ok(ex.error.frames.some((fr) => fr.name === "f"), JSON.stringify(ex.error.frames));
      assert.equal(String(ex.error), "ZeroDivisionError: division by zero");
      assert.deepEqual(seen, [ex.error]);
      assert.equal(ex.state, "kept");
      assert.equal((await sbx.runCode("'still here'")).text, "still here");
      assert.match(ex.toolText(), /^status: error\n/);
    });

    it("returns a matplotlib figure as PNG, displays in order, the value last", async () => {
      const sbx = await sandbox();
      const seen = [];
      const ex = await sbx.runCode(FIGURE + "from IPython.display import HTML, display\ndisplay(HTML('<b>hi</b>'))\n6 * 7", {
        onResult: (r) => seen.push(r),
      });
      assert.equal(ex.status, "ok", String(ex.error));
      assert.equal(ex.results.length, 3);
      const [fig, html, value] = ex.results;
      assert.ok(fig instanceof Result);
      assert.deepEqual([...fig.pngBytes().subarray(0, 8)], PNG_MAGIC);
      assert.deepEqual([...Buffer.from(fig.png, "base64").subarray(0, 8)], PNG_MAGIC);
      assert.ok(fig.formats().includes("png"));
      assert.match(fig.text, /Figure/);
      assert.equal(html.html, "<b>hi</b>");
      assert.equal(value.isMainResult, true);
      assert.equal(ex.text, "42");
      // Each display reaches onResult once, as it is shown; the value last.
      assert.deepEqual(seen.map((r) => r.formats()), ex.results.map((r) => r.formats()));
      assert.equal(seen[0].png, fig.png);
      assert.equal(seen.at(-1).isMainResult, true);
    });

    it("gives each figure's chart data beside its PNG, typed as E2B's charts", async () => {
      const sbx = await sandbox();
      const seen = [];
      const ex = await sbx.runCode(
        "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n" +
          "plt.plot([1, 2, 3], [2.5, -1, 4], label='sales')\nplt.title('Q1')\nplt.xlabel('Month')\n" +
          "plt.ylabel('Revenue (USD)')\nplt.show()\n" +
          "plt.bar(['a', 'b'], [3, 4.5], label='kg')\nplt.show()\n" +
          "plt.imshow([[0, 1], [1, 0]])\nplt.show()\n",
        { onResult: (r) => seen.push(r) },
      );
      assert.equal(ex.status, "ok", String(ex.error));
      const [line, bar, image] = ex.results.map((r) => r.chart);
      assert.ok(ex.results[0].png && ex.results[0].formats().includes("chart"));
      assert.deepEqual([line.type, line.title, line.x_label, line.y_label, line.y_unit, line.x_scale], [ChartType.LINE, "Q1", "Month", "Revenue (USD)", "USD", ScaleType.LINEAR]);
      assert.deepEqual(line.elements.map((e) => [e.label, e.points]), [["sales", [[1, 2.5], [2, -1], [3, 4]]]]);
      assert.deepEqual([bar.type, bar.orientation], ["bar", "vertical"]);
      assert.deepEqual(bar.elements.map((e) => [e.label, e.group, e.value]), [["a", "kg", 3], ["b", "kg", 4.5]]);
      assert.deepEqual([image.type, image.elements], ["unknown", []]);
      assert.match(image.reason, /image/);
      // The streamed display events carry the chart too.
      assert.deepEqual(seen.map((r) => r.chart?.type), ["line", "bar", "unknown"]);
      // A Figure as the cell's value: the main result's chart (value_chart).
      const v = await sbx.runCode("fig, ax = plt.subplots()\nax.scatter([1], [2], label='one')\nfig");
      assert.equal(v.results.at(-1).isMainResult, true);
      assert.equal(v.valueChart, v.results.at(-1).chart);
      assert.deepEqual([v.valueChart.type, v.valueChart.elements.map((e) => [e.label, e.points])], ["scatter", [["one", [[1, 2]]]]]);
      const plain = await sbx.runCode("1");
      assert.deepEqual([plain.valueChart, plain.results.at(-1).chart], [undefined, undefined]);
    });

    it("passes exit codes, raw ANSI text, envs and clear_output through", async () => {
      const sbx = await sandbox({ envs: { SBX_VAR: "from create" } });
      const ex = await sbx.runCode("!exit 3");
      assert.deepEqual([ex.status, ex.error?.name, ex.error?.exitCode], ["error", "subprocess.CalledProcessError", 3]);
      assert.equal((await sbx.runCode("1/0")).error.exitCode, undefined);
      const code = "print('\\x1b[31mred\\x1b[0m', end='\\r\\n')";
      assert.equal((await sbx.runCode(code)).logs.stdout.join(""), "red\n");
      assert.equal((await sbx.runCode(code, { rawAnsi: true })).logs.stdout.join(""), "\x1b[31mred\x1b[0m\r\n");
      // envs: the sandbox's from create, a cell's own only for that cell.
      const env = "import os\n(os.environ.get('SBX_VAR'), os.environ.get('CELL_VAR'))";
      assert.equal((await sbx.runCode(env, { envs: { CELL_VAR: "x y" } })).text, "('from create', 'x y')");
      assert.equal((await sbx.runCode(env)).text, "('from create', None)");
      await assert.rejects(sbx.runCode("1", { envs: { A: 1 } }), (e) => e instanceof BadRequestError && /envs\["A"\] must be a string/.test(e.message));
      await assert.rejects(sbx.runCode("1", { envs: { "1BAD": "x" } }), (e) => e instanceof BadRequestError && /1BAD/.test(e.message));
      // clear_output reaches onClearOutput in its place among the chunks;
      // logs keep everything (the service's result has no record of it).
      const order = [];
      const c = await sbx.runCode(
        "from IPython.display import clear_output\nprint('a', flush=True)\nclear_output(wait=True)\nprint('b', flush=True)\nclear_output()\n",
        { onStdout: (m) => order.push(m.line), onClearOutput: (wait) => order.push(`clear wait=${wait}`) },
      );
      assert.equal(c.status, "ok", String(c.error));
      assert.deepEqual(order, ["a\n", "clear wait=true", "b\n", "clear wait=false"]);
      assert.equal(c.logs.stdout.join(""), "a\nb\n");
      // Without the callback the event is ignored.
      assert.equal((await sbx.runCode("from IPython.display import clear_output\nclear_output()\n'after'")).text, "after");
    });

    it("runs commands: envs, cwd, streamed output, exit codes, timeouts (E2B's commands.run)", async () => {
      const sbx = await sandbox({ envs: { FROM_SANDBOX: "sb" } });
      assert.equal(await sbx.files.makeDir("sub"), true);
      const out = [];
      const err = [];
      const r = await sbx.commands.run('echo "$FROM_SANDBOX $FROM_CMD"; pwd; echo warn >&2', {
        envs: { FROM_CMD: "cmd" },
        cwd: "sub",
        onStdout: (d) => out.push(d),
        onStderr: (d) => err.push(d),
      });
      assert.deepEqual([r.exitCode, r.stdout, r.stderr, r.error, r.timedOut], [0, "sb cmd\n/work/sub\n", "warn\n", undefined, false]);
      assert.equal(out.join(""), r.stdout);
      assert.equal(err.join(""), r.stderr);
      // Output arrives as it is written: more than one chunk.
      const chunks = [];
      const s = await sbx.commands.run("for i in 1 2 3; do echo $i; sleep 0.3; done", { onStdout: (d) => chunks.push(d) });
      assert.equal(s.stdout, "1\n2\n3\n");
      assert.equal(chunks.join(""), "1\n2\n3\n");
      assert.ok(chunks.length >= 2, `one chunk: ${JSON.stringify(chunks)}`);
      // A non-zero exit rejects with the result, as E2B's CommandExitError.
      await assert.rejects(sbx.commands.run("echo partial; exit 7"), (e) => {
        assert.ok(e instanceof CommandExitError && e instanceof JailcellError, String(e));
        assert.deepEqual([e.exitCode, e.stdout, e.code, e.result.exitCode], [7, "partial\n", "command_exit", 7]);
        return true;
      });
      // Past its timeout: interrupted, then killed; reported, not hung.
      await assert.rejects(sbx.commands.run("sleep 600", { timeoutMs: 1000 }), (e) => e instanceof CommandExitError && e.timedOut && /timed out/.test(e.error));
      // Bad input names what was wrong.
      await assert.rejects(sbx.commands.run("true", { cwd: "/etc" }), (e) => e instanceof BadRequestError && /cwd/.test(e.message));
      await assert.rejects(sbx.commands.run("true", { envs: { "A=B": "x" } }), (e) => e instanceof BadRequestError && /A=B/.test(e.message));
      await assert.rejects(sbx.commands.run(""), (e) => e instanceof BadRequestError && /cmd/.test(e.message));
      await assert.rejects(sbx.commands.run("true", { user: "nobody" }), (e) => e instanceof BadRequestError && /user/.test(e.message));
      // The session is still the same kernel's.
      assert.equal((await sbx.runCode("import os; os.environ['FROM_SANDBOX']")).text, "sb");
    });

    it("runs background commands: wait, kill, the session free meanwhile (E2B's CommandHandle)", async () => {
      const sbx = await sandbox();
      const streamed = [];
      const h = await sbx.commands.run("for i in 1 2 3; do echo $i; sleep 0.1; done; echo fin > bg.txt", {
        background: true,
        onStdout: (d) => streamed.push(d),
      });
      assert.ok(h instanceof CommandHandle);
      assert.ok(h.pid > 0, String(h.pid));
      const r = await h.wait();
      assert.deepEqual([r.exitCode, r.stdout, h.exitCode, h.stdout], [0, "1\n2\n3\n", 0, "1\n2\n3\n"]);
      assert.equal(streamed.join(""), "1\n2\n3\n");
      assert.equal(await sbx.files.read("bg.txt"), "fin\n");
      // A server in the background, queried by a cell, then killed.
      const srv = await sbx.commands.run(
        'python3 -c "import socket,time,os\ns=socket.socket(socket.AF_UNIX)\ns.bind(\'/work/.srv.sock\'); s.listen(); os.rename(\'/work/.srv.sock\', \'/work/srv.sock\')\nc,_=s.accept(); c.sendall(b\'pong\')\ntime.sleep(600)"',
        { background: true, timeoutMs: 0 },
      );
      assert.equal(srv.exitCode, undefined);
      // The socket is renamed into place once listening: a connect between bind and listen is refused.
      const ex = await sbx.runCode(
        "import socket, time, os\nwhile not os.path.exists('/work/srv.sock'): time.sleep(0.05)\nc = socket.socket(socket.AF_UNIX); c.connect('/work/srv.sock'); c.recv(4)",
      );
      assert.equal(ex.text, "b'pong'", JSON.stringify(ex.error));
      assert.equal(await sbx.commands.kill(srv.pid), true);
      assert.equal(srv.exitCode, -9);
      assert.equal(await srv.kill(), false);
      await assert.rejects(srv.wait(), (e) => e instanceof CommandExitError && e.exitCode === -9 && /signal 9/.test(e.error));
      assert.equal(await sbx.commands.connect(h.pid), h);
      await assert.rejects(sbx.commands.connect(1 << 30), NotFoundError);
    });

    it("feeds a command's stdin and a terminal (E2B's stdin: true, sendStdin, closeStdin, pty)", async () => {
      const sbx = await sandbox();
      const cat = await sbx.commands.run("cat", { background: true, stdin: true });
      await cat.sendStdin("Hello\n");
      await cat.closeStdin();
      const r = await cat.wait();
      assert.deepEqual([r.exitCode, r.stdout], [0, "Hello\n"]);
      await assert.rejects(cat.sendStdin("late"), (e) => e instanceof BadRequestError, "input after the command ended");
      // Bytes, by pid through sandbox.commands; bytes that are not UTF-8 are refused here.
      const bytes = await sbx.commands.run("cat", { background: true, stdin: true });
      await sbx.commands.sendStdin(bytes.pid, new TextEncoder().encode("é\n"));
      await assert.rejects(bytes.sendStdin(new Uint8Array([0xff])), (e) => e instanceof BadRequestError && /UTF-8/.test(e.message));
      await sbx.commands.closeStdin(bytes.pid);
      assert.equal((await bytes.wait()).stdout, "é\n");
      const noStdin = await sbx.commands.run("sleep 30", { background: true });
      await assert.rejects(noStdin.sendStdin("x"), (e) => e instanceof BadRequestError && /stdin/.test(e.message));
      await noStdin.kill();
      // A terminal: its size, its output (the echo too) through onData and as stdout.
      const data = [];
      const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => data.push(d) });
      await assert.rejects(term.closeStdin(), (e) => e instanceof BadRequestError, "eof to a terminal");
      await sbx.pty.sendInput(term.pid, new TextEncoder().encode("stty size; exit\n"));
      const t = await term.wait();
      assert.equal(t.exitCode, 0);
      assert.match(t.stdout, /24 80/);
      assert.ok(data.every((d) => d instanceof Uint8Array));
      assert.equal(Buffer.concat(data).toString("utf8"), t.stdout);
      const resized = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} });
      await sbx.pty.resize(resized.pid, { cols: 100, rows: 30 });
      await sbx.pty.sendInput(resized.pid, new TextEncoder().encode("stty size; exit\n"));
      assert.match((await resized.wait()).stdout, /30 100/);
    });

    it("makes, stats, removes and watches files (E2B's files.makeDir, exists, getInfo, remove, watchDir)", async () => {
      const sbx = await sandbox();
      assert.equal(await sbx.files.makeDir("data/raw"), true);
      assert.equal(await sbx.files.makeDir("/work/data/raw"), false);
      assert.equal(await sbx.files.exists("data"), true);
      assert.equal(await sbx.files.exists("nope.txt"), false);
      assert.deepEqual((({ name, path, type }) => ({ name, path, type }))(await sbx.files.getInfo("data/raw")), { name: "raw", path: "data/raw", type: "dir" });
      const seen = [];
      let exited = false;
      const w = await sbx.files.watchDir("data", (ev) => seen.push(ev), { recursive: true, pollMs: 100, onExit: () => (exited = true) });
      assert.ok(w instanceof WatchHandle);
      await sbx.files.write("data/raw/a.csv", "1,2\n");
      await sbx.runCode("import os\nos.rename('data/raw/a.csv', 'data/a.csv')\nopen('data/b.txt', 'w').write('b')");
      const until = async (pred) => {
        for (let i = 0; i < 100 && !pred(); i++) await new Promise((r) => setTimeout(r, 50));
        return pred();
      };
      assert.ok(await until(() => seen.some((e) => e.name === "b.txt")), JSON.stringify(seen));
      assert.ok(seen.some((e) => e.name === "a.csv" && e.type === FilesystemEventType.CREATE), JSON.stringify(seen));
      assert.ok(seen.some((e) => e.name === "b.txt" && e.type === "write"), JSON.stringify(seen));
      const info = await sbx.files.getInfo("data/a.csv");
      assert.deepEqual([info.name, info.path, info.type, info.size], ["a.csv", "data/a.csv", "file", 4]);
      assert.ok(info.modifiedTime instanceof Date);
      // E2B's mode, permissions, owner and symlink fields; a link is described, never followed.
      await sbx.runCode("import os\nopen('f.txt', 'w').write('hi')\nos.chmod('f.txt', 0o640)\nos.symlink('f.txt', 'ln')");
      const f = await sbx.files.getInfo("f.txt");
      assert.deepEqual([f.type, f.mode, f.permissions, f.owner, f.group, f.symlinkTarget], ["file", 0o640, "-rw-r-----", "root", "root", undefined]);
      const ln = await sbx.files.getInfo("ln");
      assert.deepEqual([ln.type, ln.mode, ln.permissions, ln.symlinkTarget], ["symlink", 0, "Lrwxrwxrwx", "/work/f.txt"]);
      const listed = Object.fromEntries((await sbx.files.list()).map((e) => [e.path, e]));
      assert.deepEqual([listed["f.txt"].mode, listed["ln"].type, listed["ln"].symlinkTarget], [0o640, "symlink", "/work/f.txt"]);
      await sbx.files.remove("data");
      assert.equal(await sbx.files.exists("data/a.csv"), false);
      assert.ok(await until(() => seen.some((e) => e.type === "remove")), JSON.stringify(seen));
      await w.stop();
      const n = seen.length;
      await sbx.files.write("data/late.txt", "x");
      await new Promise((r) => setTimeout(r, 400));
      assert.equal(seen.length, n, "events after stop()");
      assert.equal(exited, false);
      await assert.rejects(sbx.files.remove("data/nope"), NotFoundError);
      await assert.rejects(sbx.files.getInfo("nope"), (e) => e instanceof NotFoundError && /nope/.test(e.message));
      await assert.rejects(sbx.files.makeDir("../x"), (e) => e instanceof BadRequestError && /\.\./.test(e.message));
      // A watch whose session ends stops by itself and says why.
      let why;
      await sbx.files.watchDir("", () => {}, { pollMs: 100, onExit: (e) => (why = e) });
      await sbx.kill();
      assert.ok(await until(() => why !== undefined), "onExit not called after the session ended");
      assert.ok(why instanceof JailcellError, String(why));
    });

    it("renames files and directories (E2B's files.rename)", async () => {
      const sbx = await sandbox();
      const meta = { author: "ana" };
      await sbx.files.write("r/a.txt", "moved", { metadata: meta });
      // Into a directory the rename makes: the entry at the new path, metadata and all.
      const e = await sbx.files.rename("r/a.txt", "r/new/sub/b.txt");
      assert.deepEqual([e.name, e.path, e.type, e.size, e.metadata], ["b.txt", "r/new/sub/b.txt", "file", 5, meta]);
      assert.equal(await sbx.files.exists("r/a.txt"), false);
      assert.equal(await sbx.files.read("r/new/sub/b.txt"), "moved");
      // A directory, with what it holds; absolute paths under either name of the workspace.
      const d = await sbx.files.rename("/work/r/new", "/home/user/moved");
      assert.deepEqual([d.name, d.path, d.type], ["moved", "moved", "dir"]);
      assert.deepEqual((await sbx.files.getInfo("moved/sub/b.txt")).metadata, meta);
      assert.equal(await sbx.files.exists("r/new"), false);
      // A directory never goes onto what exists, nor into itself; a missing source is not found.
      await assert.rejects(sbx.files.rename("moved", "r"), (e) => e instanceof BadRequestError && e.status === badRequestStatus && /exists/.test(e.message));
      await assert.rejects(sbx.files.rename("moved", "moved/in"), BadRequestError);
      await assert.rejects(sbx.files.rename("nope", "x"), (e) => e instanceof NotFoundError && /nope/.test(e.message));
    });

    it("writes file metadata and shows it back (E2B's files.write metadata, EntryInfo.metadata)", async () => {
      const sbx = await sandbox();
      // Keys as given (E2B's door lowercases; this wire does not), any printable ASCII.
      const meta = { author: "ana", "Mixed Case": '"q" <&> \\ ~', empty: "" };
      const w = await sbx.files.write("m.txt", "m", { metadata: meta });
      assert.deepEqual([w.path, w.size, w.metadata], ["m.txt", 1, meta]);
      assert.deepEqual((await sbx.files.getInfo("m.txt")).metadata, meta);
      const listed = Object.fromEntries((await sbx.files.list()).map((e) => [e.path, e.metadata]));
      assert.deepEqual(listed["m.txt"], meta);
      // Several files, the same map on each.
      const ws = await sbx.files.write([{ path: "md/1.txt", data: "1" }, { path: "md/2.txt", data: "2" }], { metadata: { source: "suite" } });
      assert.deepEqual(ws.map((i) => [i.path, i.metadata]), [["md/1.txt", { source: "suite" }], ["md/2.txt", { source: "suite" }]]);
      const md = Object.fromEntries((await sbx.files.list("md")).map((e) => [e.path, e.metadata]));
      assert.deepEqual(md, { md: undefined, "md/1.txt": { source: "suite" }, "md/2.txt": { source: "suite" } });
      // A write without metadata clears it.
      assert.equal((await sbx.files.write("m.txt", "plain")).metadata, undefined);
      assert.equal((await sbx.files.getInfo("m.txt")).metadata, undefined);
      // What a program in the sandbox sets under user.e2b. is metadata too.
      await sbx.runCode("import os\nos.setxattr('m.txt', 'user.e2b.by', b'cell')");
      assert.deepEqual((await sbx.files.getInfo("m.txt")).metadata, { by: "cell" });
      // Refused by name, and nothing written.
      for (const bad of [{ "a\nb": "v" }, { "": "v" }, { k: "caf\u00e9" }, { "del\x7f": "v" }, { "\u{1F600}": "v" }, { k: "v".repeat(4096) }]) {
        await assert.rejects(
          sbx.files.write("bad.txt", "x", { metadata: bad }),
          (e) => e instanceof BadRequestError && e.status === badRequestStatus && /metadata/.test(e.message),
          JSON.stringify(bad),
        );
      }
      await assert.rejects(sbx.files.write("bad.txt", "x", { metadata: { k: 1 } }), (e) => e instanceof BadRequestError && /metadata\["k"\]/.test(e.message));
      await assert.rejects(sbx.files.write("bad.txt", "x", { metadata: "k=v" }), BadRequestError);
      assert.equal(await sbx.files.exists("bad.txt"), false);
    });

    it("reports info, renews the timeout, samples metrics, reconnects by id", async () => {
      const sbx = await sandbox({ metadata: { user: "me" } });
      await sbx.runCode("x = 41\nblob = bytearray(32 << 20)");
      const info = await sbx.getInfo();
      assert.deepEqual([info.sandboxId, info.state, info.jailcellState, info.metadata, info.cells], [sbx.sandboxId, "running", "ready", { user: "me" }, 1]);
      assert.ok(info.startedAt instanceof Date && info.endAt instanceof Date);
      await sbx.setTimeout(90_000);
      const left = (await sbx.getInfo()).endAt.getTime() - Date.now();
      assert.ok(left > 80_000 && left <= 91_000, String(left));
      await assert.rejects(sbx.setTimeout(1e10), (e) => e instanceof BadRequestError && /max_idle_ttl/.test(e.message));
      await assert.rejects(sbx.setTimeout(0), BadRequestError);
      const m = await sbx.getMetrics();
      assert.equal(m.length, 1);
      assert.ok(m[0].memUsed > 32 << 20, String(m[0].memUsed));
      assert.ok(m[0].memUsed <= m[0].memTotal);
      assert.ok(m[0].diskTotal > 0 && m[0].cpuCount > 0 && m[0].timestamp instanceof Date);
      // Reattach by id: the same kernel, its variables.
      const again = await Sandbox.connect(sbx.sandboxId, { ...opts(), timeoutMs: 60_000 });
      assert.equal(again.sandboxId, sbx.sandboxId);
      // As E2B's: a connect with a shorter timeout leaves the end where it was.
      const kept = (await sbx.getInfo()).endAt.getTime() - Date.now();
      assert.ok(kept > 70_000, `connect shortened the end to ${kept} ms from now`);
      assert.equal((await again.runCode("x + 1")).text, "42");
      await assert.rejects(Sandbox.connect("nope-0123", opts()), NotFoundError);
      // Ending it through one ends it for both.
      assert.equal(await again.kill(), true);
      assert.equal(await sbx.isRunning(), false);
      await assert.rejects(sbx.runCode("x"), NotFoundError);
    });

    it("takes E2B's create(template, opts): a default template, its options kept", async () => {
      const sbx = await Sandbox.create("code-interpreter-v1", { ...opts(), envs: { FROM_OPTS: "kept" } });
      try {
        assert.equal((await sbx.runCode("import os; os.environ['FROM_OPTS']")).text, "kept");
      } finally {
        await sbx.kill();
      }
      await assert.rejects(Sandbox.create("no-such-policy", opts()), (e) => e instanceof BadRequestError && /no-such-policy/.test(e.message));
    });

    it("round-trips files: write, run, read, list, exists", async () => {
      const sbx = await sandbox();
      const all = Uint8Array.from({ length: 256 }, (_, i) => i);
      const w = await sbx.files.write("dir/in put.bin", all);
      assert.deepEqual(w, { name: "in put.bin", path: "dir/in put.bin", type: "file", size: 256 });
      await sbx.files.write("note.txt", "héllo\n");
      const ex = await sbx.runCode("open('out.bin','wb').write(open('dir/in put.bin','rb').read()[::-1])");
      assert.equal(ex.status, "ok", String(ex.error));
      assert.deepEqual(ex.files.map((f) => [f.path, f.change, f.size]), [["out.bin", "created", 256]]);
      const back = await sbx.files.read("out.bin", { format: "bytes" });
      assert.ok(back instanceof Uint8Array);
      assert.deepEqual([...back], [...all].reverse());
      assert.equal(await sbx.files.read("note.txt"), "héllo\n");
      assert.equal(await (await sbx.files.read("note.txt", { format: "blob" })).text(), "héllo\n");
      const entries = Object.fromEntries((await sbx.files.list()).map((e) => [e.path, e]));
      assert.ok("out.bin" in entries, Object.keys(entries).join(","));
      assert.equal(entries["dir"].type, "dir");
      assert.equal(entries["dir/in put.bin"].size, 256);
      assert.ok(entries["note.txt"].modifiedTime instanceof Date);
      assert.deepEqual((await sbx.files.list("dir")).map((e) => e.path), ["dir", "dir/in put.bin"]);
      assert.equal(await sbx.files.exists("note.txt"), true);
      assert.equal(await sbx.files.exists("missing.txt"), false);
      await assert.rejects(sbx.files.read("missing.txt"), (e) => e instanceof NotFoundError && /missing\.txt/.test(e.message));
      await assert.rejects(sbx.files.read("../../etc/passwd"), (e) => e instanceof BadRequestError && e.message.includes(".."));
      await assert.rejects(sbx.files.read("x", { format: "hex" }), BadRequestError);
    });

    it("ends a cell over its timeout with status timeout, state kept", async () => {
      const sbx = await sandbox();
      await sbx.runCode("y = 1");
      const ex = await sbx.runCode("import time\ntime.sleep(30)", { timeoutMs: 1000 });
      assert.equal(ex.status, "timeout");
      assert.ok(ex.limits.includes("time"), JSON.stringify(ex.limits));
      assert.equal(ex.state, "kept");
      assert.equal((await sbx.runCode("y + 1")).text, "2");
    });

    it("streams stdout and stderr to callbacks in order, the value last", async () => {
      const sbx = await sandbox();
      const calls = [];
      const ex = await sbx.runCode(
        "import sys, time\nfor i in range(5):\n    print(i, flush=True)\n    time.sleep(0.05)\n" +
          "print('warn', file=sys.stderr, flush=True)\n'done'",
        {
          onStdout: (m) => calls.push(["out", m]),
          onStderr: (m) => calls.push(["err", m]),
          onResult: (r) => calls.push(["result", r]),
        },
      );
      assert.equal(ex.status, "ok");
      const outs = calls.filter(([k]) => k === "out").map(([, m]) => m);
      assert.ok(outs.every((m) => m instanceof OutputMessage && m.error === false));
      assert.equal(outs.map(String).join(""), "0\n1\n2\n3\n4\n");
      assert.ok(outs.length >= 2, `${outs.length} stdout chunks: the output was not streamed`);
      assert.deepEqual(ex.logs.stdout, outs.map((m) => m.line)); // logs hold the chunks as they came
      assert.equal(ex.logs.stderr.join(""), "warn\n");
      const kinds = calls.map(([k]) => k);
      assert.equal(kinds.at(-1), "result");
      assert.equal(kinds.indexOf("err"), kinds.length - 2);
      assert.equal(calls.at(-2)[1].error, true);
      assert.equal(calls.at(-1)[1].text, "done");
      const stamps = calls.slice(0, -1).map(([, m]) => m.timestamp);
      assert.deepEqual(stamps, [...stamps].sort((a, b) => a - b));
    });

    it("answers a bad request with a typed error naming the problem", async () => {
      await assert.rejects(Sandbox.create({ ...opts(), policy: "no-such-policy" }), (e) => {
        assert.ok(e instanceof BadRequestError, String(e));
        assert.ok(e instanceof JailcellError);
        assert.equal(e.code, "bad_request");
        assert.equal(e.status, badRequestStatus);
        assert.match(e.message, /no-such-policy/);
        return true;
      });
      await assert.rejects(Sandbox.create({ ...opts(), limits: { memry_bytes: 1 } }), (e) => e instanceof BadRequestError && /memry_bytes/.test(e.message));
      const sbx = await sandbox();
      await assert.rejects(sbx.runCode(""), (e) => e instanceof BadRequestError && e.status === 0);
      await assert.rejects(sbx.runCode("1", { fixAttempts: 0 }), BadRequestError);
      await assert.rejects(sbx.runCode("1", { language: "r" }), (e) => e instanceof BadRequestError && /python/.test(e.message));
      await assert.rejects(sbx.runCode("1", { timeoutMs: -1 }), (e) => e instanceof BadRequestError && /timeoutMs/.test(e.message));
      assert.equal(await sbx.kill(), true);
      assert.equal(await sbx.kill(), false); // already ended
      await assert.rejects(sbx.runCode("1"), (e) => e instanceof NotFoundError && e.code === "not_found");
    });

    it("interrupts a running cell, busy meanwhile, state kept", async () => {
      const sbx = await sandbox();
      await sbx.runCode("kept = 'yes'");
      let started;
      const ready = new Promise((r) => (started = r));
      const running = sbx.runCode("import time\nprint('ready', flush=True)\ntime.sleep(600)", { onStdout: () => started() });
      await ready;
      await assert.rejects(sbx.runCode("1"), (e) => e instanceof BusyError && e.code === "busy");
      assert.equal(await sbx.interrupt(), true);
      const ex = await running;
      assert.deepEqual([ex.status, ex.error?.name, ex.state], ["error", "KeyboardInterrupt", "kept"]);
      assert.equal((await sbx.runCode("kept")).text, "yes");
      assert.equal(await sbx.interrupt(), false); // nothing is running now
    });

    it("runs two sandboxes at once without one waiting for the other", async () => {
      const [a, b] = await Promise.all([sandbox(), sandbox()]);
      let started;
      const ready = new Promise((r) => (started = r));
      let aDone = false;
      // a's cell runs until interrupted: b's must finish meanwhile.
      const slow = a.runCode("import time\nprint('go', flush=True)\ntime.sleep(600)", { onStdout: () => started() }).then((ex) => {
        aDone = true;
        return ex;
      });
      await ready;
      assert.equal((await b.runCode("'b'")).text, "b");
      assert.equal(aDone, false, "a's cell ended before b's ran");
      assert.equal(await a.interrupt(), true);
      assert.equal((await slow).error?.name, "KeyboardInterrupt");
    });

    it("runs a one-shot cell that hands back its files", async () => {
      const ex = await Sandbox.runOnce("open('o.txt','w').write(open('i.txt').read().upper())", {
        ...opts(),
        files: { "i.txt": "abc" },
      });
      assert.equal(ex.status, "ok", String(ex.error));
      const o = ex.files.find((f) => f.path === "o.txt");
      assert.equal(Buffer.from(o.data).toString(), "ABC");
    });

    it("ends the session on asyncDispose", async () => {
      const sbx = await Sandbox.create({ ...opts(), ttlMs: 60_000 });
      const other = await sandbox();
      assert.equal((await sbx.runCode("1 + 1")).text, "2");
      await sbx[Symbol.asyncDispose]();
      assert.equal(await sbx.isRunning(), false);
      const ids = (await other.transport.call("sessions", {})).sessions.map((s) => s.session);
      assert.ok(!ids.includes(sbx.sandboxId), "the session outlived its dispose");
    });

    more(sandbox);
  });
}

export function required(name) {
  const v = process.env[name];
  assert.ok(v, `${name} is not set: run through test/tsclient (go test), which starts the service`);
  return v;
}
