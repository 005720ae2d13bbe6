// What the tests share: the service typescript_test.go started (its URL and an
// admin's and an approver's token in the environment), agents made for one
// test each, the approver's hand, verify, and a service of a test's own that it
// can stop.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, readFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Guard } from "../src/index.js";

export const server = process.env.LINEAGE_TEST_SERVER ?? "";
const admin = process.env.LINEAGE_TEST_ADMIN_TOKEN ?? "";
const approver = process.env.LINEAGE_TEST_APPROVER_TOKEN ?? "";
export const bin = process.env.LINEAGE_TEST_BIN ?? "";

/** skip is the reason a test that needs the service skips, or false; under CI=true there is no skipping. */
export const skip: string | false = (() => {
  if (server && admin && approver && bin) return false;
  if (process.env.CI === "true") throw new Error("CI=true but no LINEAGE_TEST_SERVER: run these tests through go test ./clients/typescript");
  const why = "no LINEAGE_TEST_SERVER (run through `go test ./clients/typescript`, which starts lineagec serve)";
  console.log(`# skipping: ${why}`);
  return why;
})();

export async function call(url: string, token: string, method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(url + path, {
    method,
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (!res.ok) throw new Error(`${method} ${path}: HTTP ${res.status}: ${text}`);
  return text ? JSON.parse(text) : undefined;
}

/** The policy the framework tests share: lookup costs a credit, pay needs a person, anything else is unlisted. */
export function policy(budget: number) {
  return {
    budget,
    scar_limit: 10,
    tools: {
      lookup: { cost: 1 },
      pay: { cost: 1, requires_approval: true },
    },
    default_rule: null,
  };
}

export interface TestAgent {
  agent: string;
  token: string;
  guard: Guard;
  url: string;
  adminToken: string;
}

export async function createAgent(p: object, name = "ts-test", url = server, adminToken = admin): Promise<TestAgent> {
  const c = await call(url, adminToken, "POST", "/v1/agents", { policy: p, name });
  return { agent: c.agent, token: c.token, guard: new Guard({ url, token: c.token, timeout: "5s", retries: 1 }), url, adminToken };
}

/** approveWhenPending waits (at most 20 s) until the agent has a pending request and approves it as the approver. */
export async function approveWhenPending(agent: string): Promise<string> {
  for (const end = Date.now() + 20_000; Date.now() < end; await new Promise((r) => setTimeout(r, 50))) {
    const { pending } = await call(server, approver, "GET", "/v1/pending");
    const p = pending.find((x: any) => x.agent === agent);
    if (p) {
      const v = await call(server, approver, "POST", `/v1/agents/${p.agent}/requests/${encodeURIComponent(p.request_id)}/approve`);
      assert.equal(v.decision, "allow");
      return p.request_id;
    }
  }
  throw new Error(`no pending request of ${agent} within 20 s`);
}

export async function approve(agent: string, id: string) {
  return call(server, approver, "POST", `/v1/agents/${agent}/requests/${encodeURIComponent(id)}/approve`);
}

/** verified asserts that the agent's log verifies (GET /v1/agents/{agent}/verify) and returns its record count. */
export async function verified(a: { agent: string; url?: string; adminToken?: string }): Promise<number> {
  const r = await call(a.url ?? server, a.adminToken ?? approver, "GET", `/v1/agents/${a.agent}/verify`);
  assert.equal(r.ok, true, `verify ${a.agent}: ${JSON.stringify(r)}`);
  return r.records;
}

export async function state(agent: string) {
  return call(server, approver, "GET", `/v1/agents/${agent}`);
}

/** log returns the agent's records. */
export async function log(agent: string): Promise<any[]> {
  const res = await fetch(`${server}/v1/agents/${agent}/log`, { headers: { authorization: `Bearer ${approver}` } });
  return (await res.text()).trim().split("\n").map((l) => JSON.parse(l));
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      s.close(() => (typeof a === "object" && a ? resolve(a.port) : reject(new Error("no port"))));
    });
  });
}

/** OwnService is a `lineagec serve` of one test, which it stops to see the guard unreachable. */
export interface OwnService {
  url: string;
  adminToken: string;
  data: string;
  stop(): Promise<void>;
}

export async function startOwnService(data?: string): Promise<OwnService> {
  data ??= await mkdtemp(join(tmpdir(), "lineage-ts-"));
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const p: ChildProcess = spawn(bin, ["serve", "--addr", `127.0.0.1:${port}`, "--data", data], { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  p.stderr!.on("data", (b) => (stderr += b));
  const exited = new Promise<void>((r) => p.once("exit", () => r()));
  for (const end = Date.now() + 20_000; ; await new Promise((r) => setTimeout(r, 50))) {
    try {
      if ((await fetch(url + "/health")).ok) break;
    } catch {
      // not yet listening
    }
    if (p.exitCode !== null || Date.now() > end) throw new Error(`lineagec serve did not start: ${stderr}`);
  }
  const adminToken = (await readFile(join(data, "admin.token"), "utf8")).trim();
  return {
    url,
    adminToken,
    data,
    stop: async () => {
      p.kill("SIGTERM");
      await exited;
    },
  };
}

/** verifiedAfterRestart starts a stopped service of a test's own again over its data and asserts that the agent's log verifies. */
export async function verifiedAfterRestart(own: OwnService, agent: string): Promise<void> {
  const again = await startOwnService(own.data);
  try {
    await verified({ agent, url: again.url, adminToken: again.adminToken });
  } finally {
    await again.stop();
  }
}
