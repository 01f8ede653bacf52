// client.mjs: the official MCP TypeScript client driving jailcell, for
// mcpclient_test.go. It reports what it saw as one JSON object on stdout;
// the Go test asserts. Usage:
//
//   node client.mjs '{"transport":"stdio","command":"/path/jailcell","args":["mcp"],"env":{...},"scenario":"full"}'
//   node client.mjs '{"transport":"http","socket":"/path/j.sock","scenario":"pair"}'
//
// MCPCLIENT_DIR names the directory whose node_modules hold the pinned SDK
// and undici (scripts/fetch-mcpclient.sh).
import { createRequire } from "node:module";

const require = createRequire(process.env.MCPCLIENT_DIR + "/package.json");
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");
const { CallToolResultSchema } = require("@modelcontextprotocol/sdk/types.js");
const { Agent, fetch } = require("undici");
const Ajv2020 = require("ajv/dist/2020").default;

const opts = JSON.parse(process.argv[2]);
const callTimeout = 120_000;

function transport() {
  if (opts.transport === "stdio") {
    return new StdioClientTransport({ command: opts.command, args: opts.args, env: opts.env, stderr: "inherit" });
  }
  // HTTP over the service's Unix socket: the host is a placeholder.
  const agent = new Agent({ connect: { socketPath: opts.socket } });
  return new StreamableHTTPClientTransport(new URL("http://jailcell/mcp"), {
    fetch: (url, init) => fetch(url, { ...init, dispatcher: agent }),
  });
}

async function connect(name) {
  const client = new Client({ name, version: "1.0.0" });
  const t = transport();
  await client.connect(t);
  // Over HTTP the session ends with a DELETE (the server then closes the
  // client's jailcell session); over stdio with EOF.
  client.end = async () => {
    if (t.terminateSession) await t.terminateSession();
    await client.close();
  };
  return client;
}

async function call(client, name, args, extra = {}) {
  const res = await client.callTool({ name, arguments: args }, CallToolResultSchema, { timeout: callTimeout, ...extra });
  return {
    isError: res.isError === true,
    text: res.content.filter((c) => c.type === "text").map((c) => c.text).join(""),
    images: res.content.filter((c) => c.type === "image").map((c) => ({ mimeType: c.mimeType, bytes: Buffer.from(c.data, "base64").length })),
    structuredContent: res.structuredContent ?? null,
  };
}

async function full() {
  const c = await connect("jailcell-test-full");
  const out = { server: c.getServerVersion(), tools: (await c.listTools()).tools, calls: {} };
  out.calls.set = await call(c, "run_python", { code: "x = 20" });
  out.calls.get = await call(c, "run_python", { code: "x * 2 + 2" });
  out.calls.plot = await call(c, "run_python", {
    code: "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()",
  });
  const progress = [];
  out.calls.slow = await call(
    c,
    "run_python",
    { code: "import time\nprint('started', flush=True)\ntime.sleep(2.5)\nprint('done')" },
    { onprogress: (p) => progress.push(p) },
  );
  out.progress = progress;
  out.calls.files = await call(c, "list_files", {});
  await c.end();
  // Each structuredContent checked against its tool's output schema here
  // too (the SDK checks on its own), with the errors reported.
  const ajv = new Ajv2020({ strict: false });
  const tool = { set: "run_python", get: "run_python", plot: "run_python", slow: "run_python", files: "list_files" };
  out.schemaErrors = {};
  for (const [name, res] of Object.entries(out.calls)) {
    const schema = out.tools.find((t) => t.name === tool[name])?.outputSchema;
    if (!schema) {
      out.schemaErrors[name] = "no output schema";
      continue;
    }
    const validate = ajv.compile(schema);
    out.schemaErrors[name] = validate(res.structuredContent) ? null : ajv.errorsText(validate.errors);
  }
  return out;
}

// pair: two clients at once, each with its own session.
async function pair() {
  const [a, b] = await Promise.all([connect("jailcell-test-a"), connect("jailcell-test-b")]);
  await Promise.all([call(a, "run_python", { code: "who = 'a'" }), call(b, "run_python", { code: "who = 'b'" })]);
  const [ra, rb] = await Promise.all([call(a, "run_python", { code: "who" }), call(b, "run_python", { code: "who" })]);
  await Promise.all([a.end(), b.end()]);
  return { a: ra, b: rb };
}

// connect: initialize only, and report the error if any.
async function connectOnly() {
  const c = await connect("jailcell-test-connect");
  const tools = (await c.listTools()).tools.length;
  await c.end();
  return { tools };
}

const scenarios = { full, pair, connect: connectOnly };
try {
  const out = await scenarios[opts.scenario]();
  process.stdout.write(JSON.stringify({ ok: true, ...out }) + "\n");
  process.exit(0);
} catch (err) {
  process.stdout.write(JSON.stringify({ ok: false, error: String(err?.stack ?? err) }) + "\n");
  process.exit(1);
}
