// A host built on the official TypeScript MCP SDK with its DEFAULT options
// (request timeout 60 s, no reset on progress): it starts the MCP server
// given as its arguments on stdio, calls one tool, and prints one JSON line:
// {ok, ms, result} or {ok: false, ms, code, error}. Used by TestTSClientDefaults.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [tool, argsJSON, command, ...args] = process.argv.slice(2);
const transport = new StdioClientTransport({ command, args, env: process.env, stderr: "inherit" });
const client = new Client({ name: "ts-host", version: "1" });
await client.connect(transport);
const start = Date.now();
let out;
try {
  const result = await client.callTool({ name: tool, arguments: JSON.parse(argsJSON) });
  out = { ok: true, ms: Date.now() - start, result };
} catch (e) {
  out = { ok: false, ms: Date.now() - start, code: e.code ?? null, error: String(e) };
}
console.log(JSON.stringify(out));
await client.close();
