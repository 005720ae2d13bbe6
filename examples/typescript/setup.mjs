// Demo setup shared by the three examples: create an agent under policy.json
// with the admin token that `lineagec serve --data .lineage` wrote, and return
// a Guard holding only the agent's token (what an agent gets in production,
// with LINEAGE_SERVER and LINEAGE_TOKEN set and no admin token at all).
import { readFile } from "node:fs/promises";
// Guard is passed in: this file is outside the examples' node_modules.
export async function demoGuard(Guard) {
  const url = process.env.LINEAGE_SERVER ?? "http://127.0.0.1:8181";
  if (process.env.LINEAGE_TOKEN) return new Guard({ url });
  const admin = (await readFile(new URL("./.lineage/admin.token", import.meta.url), "utf8")).trim();
  const policy = JSON.parse(await readFile(new URL("./policy.json", import.meta.url), "utf8"));
  const res = await fetch(`${url}/v1/agents`, {
    method: "POST",
    headers: { authorization: `Bearer ${admin}`, "content-type": "application/json" },
    body: JSON.stringify({ policy, name: "ts-example" }),
  });
  if (!res.ok) throw new Error(`creating the demo agent: HTTP ${res.status} ${await res.text()}`);
  const { agent, token } = await res.json();
  console.log(`agent ${agent}; to approve a pending call: LINEAGE_SERVER=${url} LINEAGE_TOKEN=$(cat ../.lineage/admin.token) lineagec approve ${agent} <request id>`);
  return new Guard({ url, token });
}
