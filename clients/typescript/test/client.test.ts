// Guard itself against the real service: verdicts as data, authorize's
// errors, wait (looped past the service's 60 s cap), retries with the same id
// (503 unknown_outcome, 429 with Retry-After, a lost answer), deadlines.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Denied, durationMs, Guard, GuardError, GuardUnavailable, PendingTimeout, requestId, verdictText } from "../src/index.js";
import { approve, createAgent, log, policy, skip, verified } from "./helpers.js";

test("durationMs reads Go-style durations and refuses others", () => {
  assert.equal(durationMs("30s"), 30_000);
  assert.equal(durationMs("1m30s"), 90_000);
  assert.equal(durationMs("500ms"), 500);
  assert.equal(durationMs("2h"), 7_200_000);
  assert.equal(durationMs(1500), 1500);
  assert.equal(durationMs("0"), 0);
  for (const bad of ["", "30", "1x", "-1s", "s"]) assert.throws(() => durationMs(bad), RangeError, bad);
  assert.throws(() => durationMs(-1), RangeError);
});

test("requestId keeps an id the service accepts and cleans one it would not", () => {
  assert.equal(requestId("call_abc-1.2:3~"), "call_abc-1.2:3~");
  assert.equal(requestId("toolu_01 x/y"), "toolu_01_x_y");
  assert.match(requestId(undefined), /^lg-[0-9a-f-]{36}$/);
  assert.match(requestId("x".repeat(200)), /^lg-/);
  assert.match(requestId(".."), /^lg-/);
});

test("Guard needs a URL and a token, from options or the environment", () => {
  assert.throws(() => new Guard({ url: "", token: "t" }), /not an http\(s\) URL/);
  assert.throws(() => new Guard({ url: "ftp://x", token: "t" }), /not an http\(s\) URL/);
  assert.throws(() => new Guard({ url: "http://127.0.0.1:1" }), /no token/);
  process.env.LINEAGE_SERVER = "http://127.0.0.1:9/";
  process.env.LINEAGE_TOKEN = "tok";
  try {
    assert.equal(new Guard().url, "http://127.0.0.1:9");
  } finally {
    delete process.env.LINEAGE_SERVER;
    delete process.env.LINEAGE_TOKEN;
  }
});

test("request: a verdict is data, whatever the decision; authorize throws unless allowed", { skip }, async () => {
  const a = await createAgent(policy(10), "client");
  const g = a.guard;
  assert.equal(await g.agent(), a.agent, "the agent id comes from /v1/whoami");
  const ok = await g.request("lookup", { q: "x" }, { id: "r1" });
  assert.equal(ok.decision, "allow");
  assert.equal(ok.request_id, "r1");
  const no = await g.request("delete_all", {});
  assert.equal(no.decision, "deny");
  assert.equal(no.reason, "unlisted_tool");
  assert.match(no.request_id, /^lg-/, "every logical call has an id");
  const pend = await g.request("pay", { amount: 1 }, { id: "p1" });
  assert.equal(pend.decision, "pending");
  assert.equal((await g.authorize("lookup", { q: "y" })).decision, "allow");
  await assert.rejects(g.authorize("delete_all", {}), (e: unknown) => e instanceof Denied && e.verdict.reason === "unlisted_tool");
  await assert.rejects(g.authorize("pay", { amount: 2 }, { id: "p2", wait: "200ms" }), (e: unknown) => e instanceof PendingTimeout && e.requestId === "p2");
  // The same id with other args is an error answer, not a verdict.
  await assert.rejects(g.request("lookup", { q: "other" }, { id: "r1" }), (e: unknown) => e instanceof GuardError && e.code === "id_conflict" && e.status === 409);
  // A wait ends when a person decides.
  const waited = g.request("pay", { amount: 3 }, { id: "p3", wait: "20s" });
  await new Promise((r) => setTimeout(r, 200));
  await approve(a.agent, "p3");
  const v = await waited;
  assert.equal(v.decision, "allow");
  assert.equal(v.request_id, "p3");
  assert.match(verdictText({ tool: "pay", verdict: pend }), /a person must approve it \(request p1/);
  await verified(a);
});

test("an unknown token is an error answer (401), not unavailability", { skip }, async () => {
  const a = await createAgent(policy(1), "client-401");
  const g = new Guard({ url: a.url, token: "lgt_not-a-token", retries: 0 });
  await assert.rejects(g.request("lookup", {}), (e: unknown) => e instanceof GuardError && e.status === 401);
});

/** flaky wraps the real fetch: the first n answers to requests matching `when` are replaced by `answer` (after the service has acted). */
function flaky(n: number, when: (url: string, init?: RequestInit) => boolean, answer: () => Response) {
  const seen: { url: string; body?: string }[] = [];
  let left = n;
  const f: typeof fetch = async (input, init) => {
    const url = String(input);
    seen.push({ url, body: init?.body as string | undefined });
    const res = await fetch(input, init);
    if (left > 0 && when(url, init)) {
      left--;
      await res.arrayBuffer();
      return answer();
    }
    return res;
  };
  return { fetch: f, seen };
}

test("a 503 unknown_outcome or a lost answer is retried with the same id: one decision, one record", { skip }, async () => {
  const a = await createAgent(policy(10), "client-retry");
  const isPost = (_: string, init?: RequestInit) => init?.method === "POST";
  const lost = flaky(1, isPost, () => Response.json({ code: "unknown_outcome", message: "commit not confirmed" }, { status: 503 }));
  const g = new Guard({ url: a.url, token: a.token, fetch: lost.fetch });
  const v = await g.request("lookup", { q: "once" });
  assert.equal(v.decision, "allow");
  const posts = lost.seen.filter((s) => s.body);
  assert.equal(posts.length, 2, "tried twice");
  assert.equal(JSON.parse(posts[0]!.body!).id, JSON.parse(posts[1]!.body!).id, "with the same id");
  const actions = (await log(a.agent)).filter((r) => r.body?.request?.tool === "lookup");
  assert.equal(actions.length, 1, `one record of the call: ${JSON.stringify(actions)}`);
  assert.equal((await a.guard.state()).spent, 1, "charged once");

  const limited = flaky(2, isPost, () => new Response(JSON.stringify({ code: "too_many_requests", message: "slow down" }), { status: 429, headers: { "retry-after": "0.05" } }));
  const g2 = new Guard({ url: a.url, token: a.token, fetch: limited.fetch });
  assert.equal((await g2.request("lookup", { q: "again" })).decision, "allow");
  assert.equal(limited.seen.filter((s) => s.body).length, 3);

  const always = flaky(99, isPost, () => Response.json({ code: "unavailable", message: "store down" }, { status: 503 }));
  const g3 = new Guard({ url: a.url, token: a.token, fetch: always.fetch, retries: 2 });
  await assert.rejects(g3.request("lookup", { q: "never" }), (e: unknown) => e instanceof GuardUnavailable && /store down/.test((e as Error).message));
  await verified(a);
});

test("wait is several server waits past the service's 60 s cap", { skip }, async () => {
  const a = await createAgent(policy(10), "client-wait");
  const waits: string[] = [];
  let n = 0;
  // A fetch that answers the waits itself (no 2-minute test): pending twice, then the real verdict after approval.
  const f: typeof fetch = async (input, init) => {
    const url = new URL(String(input));
    if (url.searchParams.has("wait")) {
      waits.push(url.searchParams.get("wait")!);
      if (++n < 3) {
        const real = await fetch(new URL(url.pathname, url), init); // the current verdict, no wait
        return real;
      }
      await approve(a.agent, "w1");
    }
    return fetch(input, init);
  };
  const g = new Guard({ url: a.url, token: a.token, fetch: f });
  const v = await g.request("pay", { amount: 1 }, { id: "w1", wait: "2m30s" });
  assert.equal(v.decision, "allow");
  assert.equal(waits.length, 3);
  assert.deepEqual(waits, ["60000ms", "60000ms", "60000ms"], "each server wait is at most 60 s; the loop goes on while the wait lasts");
});

test("every call has a deadline: an unreachable service is GuardUnavailable within it", async () => {
  const g = new Guard({ url: "http://127.0.0.1:9", token: "t", timeout: "1s", retries: 1 });
  const t0 = Date.now();
  await assert.rejects(g.request("lookup", {}), GuardUnavailable);
  assert.ok(Date.now() - t0 < 2000);
  // A service that never answers: the deadline ends the call.
  const { createServer } = await import("node:net");
  const silent = createServer(() => {});
  await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
  const port = (silent.address() as { port: number }).port;
  try {
    const h = new Guard({ url: `http://127.0.0.1:${port}`, token: "t", timeout: "300ms", retries: 3 });
    const t1 = Date.now();
    await assert.rejects(h.request("lookup", {}), (e: unknown) => e instanceof GuardUnavailable && /deadline/.test((e as Error).message));
    assert.ok(Date.now() - t1 < 1500, `took ${Date.now() - t1} ms`);
  } finally {
    silent.close();
  }
});
