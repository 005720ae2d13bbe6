// LangChain.js 1.x's own agent loop (createAgent), driven by its own fake chat
// model (fakeModel from @langchain/core/testing), with the tools guarded by
// lineageMiddleware or guardTool against the real service.
import assert from "node:assert/strict";
import { test } from "node:test";
import { AIMessage, createAgent, tool } from "langchain";
import { fakeModel } from "@langchain/core/testing";
import { z } from "zod";
import { guardTool, lineageMiddleware } from "../src/langchain.js";
import { approveWhenPending, createAgent as createLineageAgent, policy, skip, startOwnService, state, verified, verifiedAfterRestart } from "./helpers.js";

type Call = { id: string; name: string; args: Record<string, unknown> };

/** scripted queues the given tool calls, one model turn each, then "done". */
function scripted(steps: Call[][]) {
  const model = fakeModel();
  for (const calls of steps) model.respondWithTools(calls);
  model.respond(new AIMessage("done"));
  return model;
}

/** toolResult finds the text the model got back for one call in the messages of one of its calls. */
function toolResult(messages: any[], id: string): string {
  for (const m of messages) {
    if (m.tool_call_id === id) return typeof m.content === "string" ? m.content : JSON.stringify(m.content);
  }
  throw new Error(`no tool message for ${id}`);
}

function messagesOf(model: ReturnType<typeof fakeModel>, i: number): any[] {
  const c: any = model.calls[i];
  assert.ok(c, `the model had no call ${i}`);
  return c.messages ?? c;
}

function tools(ran: string[]) {
  return [
    tool(
      async ({ q }: { q: string }) => {
        ran.push("lookup");
        return `found ${q}`;
      },
      { name: "lookup", description: "look up a thing", schema: z.object({ q: z.string() }) },
    ),
    tool(
      async ({ amount }: { amount: number }) => {
        ran.push("pay");
        return `paid ${amount}`;
      },
      { name: "pay", description: "pay an invoice", schema: z.object({ amount: z.number() }) },
    ),
    tool(
      async () => {
        ran.push("delete_all");
        return "deleted";
      },
      { name: "delete_all", description: "delete everything", schema: z.object({}) },
    ),
  ];
}

test("langchain middleware: allowed runs, denied does not, pending waits for a person", { skip }, async () => {
  const a = await createLineageAgent(policy(10), "langchain");
  const ran: string[] = [];
  const model = scripted([
    [{ id: "call_lookup_1", name: "lookup", args: { q: "invoice 7" } }],
    [{ id: "call_delete_1", name: "delete_all", args: {} }],
    [{ id: "call_pay_1", name: "pay", args: { amount: 5 } }],
  ]);
  const agent = createAgent({ model, tools: tools(ran), middleware: [lineageMiddleware(a.guard, { wait: "20s" })] });
  const approved = approveWhenPending(a.agent);
  const result = await agent.invoke({ messages: [{ role: "user", content: "pay invoice 7" }] });
  assert.equal(await approved, "call_pay_1", "the tool-call id is the request id");
  assert.deepEqual(ran, ["lookup", "pay"]);
  assert.equal(toolResult(messagesOf(model, 1), "call_lookup_1"), "found invoice 7");
  const denial = toolResult(messagesOf(model, 2), "call_delete_1");
  console.log(`# langchain: the model's view of a denial: ${denial}`);
  assert.match(denial, /delete_all was denied and did not run.*Reason: unlisted_tool\. Scar: moderate \(weight 3\)\. Credits left: 9 of 10\./);
  assert.equal(toolResult(messagesOf(model, 3), "call_pay_1"), "paid 5");
  assert.equal(result.messages.at(-1)?.content, "done");
  await verified(a);
});

test("langchain middleware: budget exhausted mid-loop terminates the agent and ends the loop", { skip }, async () => {
  const a = await createLineageAgent(policy(2), "langchain-budget");
  const ran: string[] = [];
  const model = scripted([
    [{ id: "b1", name: "lookup", args: { q: "a" } }],
    [{ id: "b2", name: "lookup", args: { q: "b" } }],
    [{ id: "b3", name: "lookup", args: { q: "c" } }],
  ]);
  const agent = createAgent({ model, tools: tools(ran), middleware: [lineageMiddleware(a.guard)] });
  const result = await agent.invoke({ messages: [{ role: "user", content: "look up three things" }] });
  assert.deepEqual(ran, ["lookup", "lookup"]);
  assert.equal(a.guard.terminated, "budget_exhausted");
  assert.equal(model.callCount, 2, "no model call after the call that exhausted the budget");
  assert.equal(toolResult(result.messages, "b2"), "found b");
  assert.equal((await state(a.agent)).status, "terminated");
  await verified(a);
});

test("langchain guardTool: one guarded tool in createAgent", { skip }, async () => {
  const a = await createLineageAgent(policy(10), "langchain-tool");
  const ran: string[] = [];
  const [lookup, , del] = tools(ran);
  const model = scripted([
    [{ id: "t1", name: "lookup", args: { q: "x" } }],
    [{ id: "t2", name: "delete_all", args: {} }],
  ]);
  const agent = createAgent({ model, tools: [guardTool(lookup!, a.guard), guardTool(del!, a.guard)] });
  await agent.invoke({ messages: [{ role: "user", content: "go" }] });
  assert.deepEqual(ran, ["lookup"]);
  assert.equal(toolResult(messagesOf(model, 1), "t1"), "found x");
  assert.match(toolResult(messagesOf(model, 2), "t2"), /delete_all was denied and did not run \(request t2\)/);
  await verified(a);
});

test("langchain middleware: the service stopped: the tool does not run (fails closed)", { skip }, async () => {
  const own = await startOwnService();
  const a = await createLineageAgent(policy(10), "langchain-down", own.url, own.adminToken);
  await a.guard.agent();
  await own.stop();
  const ran: string[] = [];
  const model = scripted([[{ id: "d1", name: "lookup", args: { q: "x" } }]]);
  const agent = createAgent({ model, tools: tools(ran), middleware: [lineageMiddleware(a.guard)] });
  await agent.invoke({ messages: [{ role: "user", content: "look" }] });
  assert.deepEqual(ran, []);
  assert.match(toolResult(messagesOf(model, 1), "d1"), /did not run: the guard could not decide it/);
  await verifiedAfterRestart(own, a.agent);
});
