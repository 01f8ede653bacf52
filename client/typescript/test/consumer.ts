// A user's strict TypeScript against the shipped declarations (dist/*.d.ts):
// test/tsclient compiles it (tsc -p test/tsconfig.consumer.json, no emit)
// after the build. The @ts-expect-error lines must stay errors: the types
// refuse what the client would refuse.

import {
  BadRequestError,
  type CommandHandle,
  type CommandResult,
  type EntryInfo,
  type FilesystemEvent,
  type SandboxInfo,
  type SandboxMetrics,
  type WatchHandle,
  type Execution,
  HttpTransport,
  JailcellError,
  JsonLinesTransport,
  type OutputMessage,
  type Result,
  Sandbox,
  type SessionInfo,
  type WireResult,
  type WriteInfo,
} from "../dist/index.js";

export async function use(): Promise<void> {
  const sbx = await Sandbox.create({ socket: "/run/jailcell/jailcell.sock", ttlMs: 60_000, limits: { memory_bytes: 1 << 28 } });
  const ex: Execution = await sbx.runCode("1 + 1", {
    onStdout: (m: OutputMessage) => m.line.length,
    onResult: async (r: Result) => r.pngBytes()?.byteLength,
    timeoutMs: 1000,
    files: { "a.txt": "text", "b.bin": new Uint8Array([1]) },
  });
  const text: string | undefined = ex.text;
  const png: string | undefined = ex.results[0]?.png;
  const raw: WireResult | undefined = ex.raw.result;
  // Charts narrow on type, as E2B's ChartTypes.
  const chart = ex.results[0]?.chart;
  const points: [number, number][] | undefined = chart?.type === "line" ? chart.elements[0]?.points : undefined;
  const bars: number | undefined = chart?.type === "bar" ? chart.elements[0]?.value : undefined;
  const exitCode: number | undefined = ex.error?.exitCode;
  await sbx.runCode("print(1)", { rawAnsi: true, envs: { A: "1" }, onClearOutput: (wait: boolean) => wait });
  void [points, bars, exitCode];
  // commands.run's overloads: a result in the foreground, a handle in the background.
  const cr: CommandResult = await sbx.commands.run("ls", { envs: { A: "1" }, cwd: "sub", timeoutMs: 5000, onStdout: (d: string) => d.length });
  const ch: CommandHandle = await sbx.commands.run("sleep 1", { background: true });
  const waited: CommandResult = await ch.wait();
  // stdin and terminals, with E2B's names.
  const cat: CommandHandle = await sbx.commands.run("cat", { background: true, stdin: true });
  await cat.sendStdin("text");
  await cat.sendStdin(new Uint8Array([10]), { requestTimeoutMs: 1000 });
  await sbx.commands.sendStdin(cat.pid, "more");
  await cat.closeStdin();
  await sbx.commands.closeStdin(cat.pid);
  const term: CommandHandle = await sbx.pty.create({ cols: 80, rows: 24, onData: (d: Uint8Array) => d.byteLength, cwd: "sub" });
  await sbx.pty.sendInput(term.pid, new TextEncoder().encode("exit\n"));
  await sbx.pty.resize(term.pid, { cols: 100, rows: 30 });
  const termKilled: boolean = await sbx.pty.kill(term.pid);
  void termKilled;
  const w: WatchHandle = await sbx.files.watchDir("d", (ev: FilesystemEvent) => ev.type === "create");
  await w.stop();
  const si: SandboxInfo = await sbx.getInfo();
  const sm: SandboxMetrics[] = await sbx.getMetrics();
  const again: Sandbox = await Sandbox.connect(sbx.sandboxId, { socket: "/s", timeoutMs: 1000 });
  await sbx.setTimeout(60_000);
  const moved: EntryInfo = await sbx.files.rename("a.txt", "d/b.txt");
  void [cr, waited, si, sm, again, moved, await sbx.files.makeDir("d"), await sbx.files.remove("d"), await sbx.files.getInfo("d")];
  const s: string = await sbx.files.read("a.txt");
  const b: Uint8Array = await sbx.files.read("b.bin", { format: "bytes" });
  const blob: Blob = await sbx.files.read("b.bin", { format: "blob" });
  const list: EntryInfo[] = await sbx.files.list();
  // File metadata, E2B's names: on a write (one file or several), back on entries.
  const wi: WriteInfo = await sbx.files.write("m.txt", "x", { metadata: { author: "ana" } });
  const wis: WriteInfo[] = await sbx.files.write([{ path: "a.txt", data: "1" }], { metadata: { k: "v" } });
  const md: Record<string, string> | undefined = list[0]?.metadata ?? wi.metadata ?? wis[0]?.metadata;
  void md;
  const info: SessionInfo = await sbx.hibernate();
  const killed: boolean = await sbx.kill();
  void [text, png, raw, s, b, blob, list, info, killed];

  await Sandbox.create({ url: "http://127.0.0.1:8080", token: "t" });
  await Sandbox.create({ transport: new JsonLinesTransport(["jailcell", "json"]) });
  await Sandbox.create({ transport: new HttpTransport({ socketPath: "/s" }) });
  try {
    await sbx.runCode("x");
  } catch (e) {
    if (e instanceof BadRequestError) {
      const code: string = e.code;
      const status: number = e.status;
      void [code, status];
    }
    void (e instanceof JailcellError);
  }

  // @ts-expect-error code is a string
  await sbx.runCode(42);
  // @ts-expect-error no such format
  await sbx.files.read("a", { format: "hex" });
  // @ts-expect-error a text read is a string, not bytes
  const wrong: Uint8Array = await sbx.files.read("a");
  void wrong;
  // @ts-expect-error milliseconds are numbers
  await Sandbox.create({ ttlMs: "60" });
  // @ts-expect-error env values are strings
  await Sandbox.create({ envs: { A: 1 } });
  // @ts-expect-error a foreground run gives a result, not a handle
  const notHandle: CommandHandle = await sbx.commands.run("ls");
  void notHandle;
  // @ts-expect-error metadata values are strings
  await sbx.files.write("m.txt", "x", { metadata: { n: 1 } });
  // E2B's lifecycle, every shape of it; jailcell's own name.
  await Sandbox.create({ timeoutMs: 1000, lifecycle: { onTimeout: "pause", autoResume: true } });
  await Sandbox.create({ lifecycle: { onTimeout: { action: "pause", keepMemory: true } } });
  await Sandbox.create({ lifecycle: { onTimeout: { action: "kill" } } });
  await Sandbox.create({ hibernateOnIdle: true });
  const paused: "kill" | "pause" = si.lifecycle.onTimeout;
  void paused;
  // @ts-expect-error onTimeout is "kill" or "pause"
  await Sandbox.create({ lifecycle: { onTimeout: "hibernate" } });
  // @ts-expect-error keepMemory goes with action "pause" only
  await Sandbox.create({ lifecycle: { onTimeout: { action: "kill", keepMemory: true } } });
  // @ts-expect-error a terminal needs its size and onData
  await sbx.pty.create({ cols: 80 });
}
