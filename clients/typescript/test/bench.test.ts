// A small benchmark: the time Guard.request adds to a decision over a bare
// fetch of the same POST (p50, p99), against the real service. Each side has
// an agent of its own and stays under the service's per-agent burst (200).
import { randomUUID } from "node:crypto";
import { test } from "node:test";
import { Guard } from "../src/index.js";
import { createAgent, skip } from "./helpers.js";

const N = 150;
const WARM = 20;

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

test("benchmark: per-call overhead of Guard.request over a bare fetch", { skip }, async () => {
  const p = { budget: 1_000_000, tools: { lookup: { cost: 0 } } };
  const viaGuard = await createAgent(p, "bench-guard");
  const bare = await createAgent(p, "bench-fetch");
  // The guard's own time: its whole call minus the time inside fetch (until the
  // answer's headers; reading the body counts as the guard's), so the
  // service's noise on a shared machine mostly cancels out of this number.
  let inFetch = 0;
  const timed: typeof fetch = async (input, init) => {
    const t = performance.now();
    try {
      return await fetch(input, init);
    } finally {
      inFetch += performance.now() - t;
    }
  };
  const guard = new Guard({ url: viaGuard.url, token: viaGuard.token, fetch: timed });
  await guard.agent();
  const url = `${bare.url}/v1/agents/${bare.agent}/requests`;
  const headers = { authorization: `Bearer ${bare.token}`, "content-type": "application/json", accept: "application/json" };
  const fetchOnce = async () => {
    const res = await fetch(url, { method: "POST", headers, body: JSON.stringify({ id: randomUUID(), tool: "lookup", args: { q: "x" } }) });
    await res.json();
  };
  const guardOnce = async () => {
    await guard.request("lookup", { q: "x" });
  };
  const g: number[] = [];
  const f: number[] = [];
  const own: number[] = [];
  for (let i = 0; i < WARM + N; i++) {
    // Interleaved, so both see the same machine and the same store.
    let t = performance.now();
    await fetchOnce();
    if (i >= WARM) f.push(performance.now() - t);
    t = performance.now();
    inFetch = 0;
    await guardOnce();
    const d = performance.now() - t;
    if (i >= WARM) {
      g.push(d);
      own.push(d - inFetch);
    }
  }
  const ms = (x: number) => x.toFixed(3);
  console.log(
    `# benchmark (${N} calls each, ms): bare fetch p50 ${ms(pct(f, 50))} p99 ${ms(pct(f, 99))}; ` +
      `Guard.request p50 ${ms(pct(g, 50))} p99 ${ms(pct(g, 99))}; difference p50 ${ms(pct(g, 50) - pct(f, 50))} p99 ${ms(pct(g, 99) - pct(f, 99))}; ` +
      `the client's own time (its call minus fetch) p50 ${ms(pct(own, 50))} p99 ${ms(pct(own, 99))}`,
  );
});
