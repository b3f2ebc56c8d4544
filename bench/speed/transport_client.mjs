// Round trips from the official TypeScript MCP SDK client (what Node-based assistants embed),
// for bench/speed/transport.py and bench/speed/latency.py: one session per entry of SPEC.sessions (a stdio
// server spawned by the SDK's transport, or a running streamable HTTP server), each making its
// calls in blocks that alternate between the sessions.
//
//   node bench/speed/transport_client.mjs SDK_DIR SPEC_JSON
//
// SPEC_JSON: {"sessions": {NAME: {"stdio": {"command", "args", "env"}} or {"http": URL},
//             with "calls": [[tool, args], ...]}, "n": calls per block, "rounds": blocks}
// Prints one JSON object: {"<NAME> <tool>": [ms, ...], ...}, after 20 untimed calls of each
// kind per session. Calls go through Client.callTool after listTools, as a client does: the
// result is checked against the tool's output schema with the validator the SDK compiled once.
//
// SDK_DIR is either the 2.x client package (node_modules/@modelcontextprotocol/client, which the
// MCP Inspector 2.x brings) or the 1.x single package (node_modules/@modelcontextprotocol/sdk).
import { existsSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [sdkDir, specJson] = process.argv.slice(2);
const spec = JSON.parse(specJson);
const load = (...rel) => import(pathToFileURL(join(sdkDir, "dist", ...rel)).href);
const v1 = existsSync(join(sdkDir, "dist", "esm", "client", "index.js"));
const { Client, StreamableHTTPClientTransport } = v1
  ? { ...(await load("esm", "client", "index.js")),
      ...(await load("esm", "client", "streamableHttp.js")) }
  : await load("index.mjs");
const { StdioClientTransport } = await (v1 ? load("esm", "client", "stdio.js") : load("stdio.mjs"));

async function open(transport) {
  const client = new Client({ name: "rag-mcp-bench", version: "1" }, { capabilities: {} });
  await client.connect(transport);
  await client.listTools();
  return client;
}

const sessions = {};
for (const [name, s] of Object.entries(spec.sessions)) {
  sessions[name] = await open(s.http
    ? new StreamableHTTPClientTransport(new URL(s.http))
    : new StdioClientTransport({ ...s.stdio, stderr: "ignore" }));
}
const times = {};
async function block(name, client, tool, args, n, keep) {
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    const r = await client.callTool({ name: tool, arguments: args });
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    if (r.isError) throw new Error(`${tool} over ${name} failed: ${JSON.stringify(r.content)}`);
    if (keep) (times[`${name} ${tool}`] ??= []).push(ms);
  }
}
for (const [name, client] of Object.entries(sessions)) {
  for (const [tool, args] of spec.sessions[name].calls) {
    await block(name, client, tool, args, 20, false);
  }
}
for (let r = 0; r < spec.rounds; r++) {
  for (const [name, client] of Object.entries(sessions)) {
    for (const [tool, args] of spec.sessions[name].calls) {
      await block(name, client, tool, args, spec.n, true);
    }
  }
}
for (const client of Object.values(sessions)) await client.close();
process.stdout.write(JSON.stringify(times) + "\n");
