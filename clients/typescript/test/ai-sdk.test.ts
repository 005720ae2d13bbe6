// The Vercel AI SDK's own loop (generateText with stopWhen), driven by its own
// mock model (MockLanguageModelV4 from ai/test), with the tools guarded by
// guardTools against the real service.
import assert from "node:assert/strict";
import { test } from "node:test";
import { generateText, stepCountIs, tool, type ModelMessage } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { z } from "zod";
import { Guard } from "../src/index.js";
import { guardTools, terminated } from "../src/ai-sdk.js";
import { approveWhenPending, createAgent, policy, skip, startOwnService, state, verified, verifiedAfterRestart } from "./helpers.js";

type Call = { id: string; name: string; args: object };

const usage = {
  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 1, text: 1, reasoning: 0 },
};

/** scripted is a mock model that makes the given tool calls, one step each, then says "done"; it keeps every prompt it got. */
function scripted(steps: Call[][]) {
  const prompts: any[][] = [];
  const model = new MockLanguageModelV4({
    doGenerate: async (options: any) => {
      prompts.push(options.prompt);
      const calls = steps[prompts.length - 1];
      if (!calls) {
        return { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: undefined }, usage, warnings: [] } as any;
      }
      return {
        content: calls.map((c) => ({ type: "tool-call", toolCallId: c.id, toolName: c.name, input: JSON.stringify(c.args) })),
        finishReason: { unified: "tool-calls", raw: undefined },
        usage,
        warnings: [],
      } as any;
    },
  });
  return { model, prompts };
}

/** toolResult finds the text the model got back for one tool call in a prompt. */
function toolResult(prompt: any[], id: string): string {
  for (const m of prompt) {
    if (m.role !== "tool") continue;
    for (const p of m.content) {
      if (p.toolCallId === id) return typeof p.output?.value === "string" ? p.output.value : JSON.stringify(p.output?.value);
    }
  }
  throw new Error(`no tool result for ${id} in ${JSON.stringify(prompt)}`);
}

function tools(ran: string[]) {
  return {
    lookup: tool({
      description: "look up a thing",
      inputSchema: z.object({ q: z.string() }),
      execute: async ({ q }) => {
        ran.push("lookup");
        return `found ${q}`;
      },
    }),
    pay: tool({
      description: "pay an invoice",
      inputSchema: z.object({ amount: z.number() }),
      execute: async ({ amount }) => {
        ran.push("pay");
        return `paid ${amount}`;
      },
    }),
    delete_all: tool({
      description: "delete everything",
      inputSchema: z.object({}),
      execute: async () => {
        ran.push("delete_all");
        return "deleted";
      },
    }),
  };
}

test("ai-sdk: allowed runs, denied does not, pending waits for a person", { skip }, async () => {
  const a = await createAgent(policy(10), "ai-sdk");
  const ran: string[] = [];
  const { model, prompts } = scripted([
    [{ id: "call-lookup-1", name: "lookup", args: { q: "invoice 7" } }],
    [{ id: "call-delete-1", name: "delete_all", args: {} }],
    [{ id: "call-pay-1", name: "pay", args: { amount: 5 } }],
  ]);
  const approved = approveWhenPending(a.agent);
  const result = await generateText({
    model,
    tools: guardTools(tools(ran), a.guard, { wait: "20s" }),
    stopWhen: [stepCountIs(10), terminated(a.guard)],
    prompt: "pay invoice 7",
  });
  assert.equal(await approved, "call-pay-1", "the framework's tool-call id is the request id");
  assert.deepEqual(ran, ["lookup", "pay"], "lookup and the approved pay ran once each; delete_all never");
  assert.equal(toolResult(prompts[1]!, "call-lookup-1"), "found invoice 7");
  const denial = toolResult(prompts[2]!, "call-delete-1");
  console.log(`# ai-sdk: the model's view of a denial: ${denial}`);
  assert.match(denial, /delete_all was denied and did not run/);
  assert.match(denial, /Reason: unlisted_tool\. Scar: moderate \(weight 3\)\. Credits left: 9 of 10\./);
  assert.equal(toolResult(prompts[3]!, "call-pay-1"), "paid 5");
  assert.equal(result.text, "done");
  assert.ok((await verified(a)) >= 5);
});

test("ai-sdk: a pending call that no one approves does not run, and the model is told who must act", { skip }, async () => {
  const a = await createAgent(policy(10), "ai-sdk-pending");
  const ran: string[] = [];
  const { model, prompts } = scripted([[{ id: "call-pay-2", name: "pay", args: { amount: 9 } }]]);
  await generateText({ model, tools: guardTools(tools(ran), a.guard), stopWhen: stepCountIs(5), prompt: "pay" });
  assert.deepEqual(ran, []);
  const text = toolResult(prompts[1]!, "call-pay-2");
  console.log(`# ai-sdk: the model's view of a pending call: ${text}`);
  assert.match(text, /a person must approve it \(request call-pay-2/);
  await verified(a);
});

test("ai-sdk: budget exhausted mid-loop terminates the agent and ends the loop", { skip }, async () => {
  const a = await createAgent(policy(2), "ai-sdk-budget");
  const ran: string[] = [];
  const { model, prompts } = scripted([
    [{ id: "b1", name: "lookup", args: { q: "a" } }],
    [{ id: "b2", name: "lookup", args: { q: "b" } }],
    [{ id: "b3", name: "lookup", args: { q: "c" } }],
  ]);
  const result = await generateText({
    model,
    tools: guardTools(tools(ran), a.guard),
    stopWhen: [stepCountIs(10), terminated(a.guard)],
    prompt: "look up three things",
  });
  assert.deepEqual(ran, ["lookup", "lookup"], "the second lookup spent the last credit and ran");
  assert.equal(a.guard.terminated, "budget_exhausted");
  assert.equal(result.steps.length, 2, "the loop ended after the step that exhausted the budget");
  assert.equal(prompts.length, 2);
  assert.equal((await state(a.agent)).status, "terminated");
  // A loop that goes on anyway is told, and the tool does not run.
  const more = scripted([[{ id: "b4", name: "lookup", args: { q: "d" } }]]);
  await generateText({ model: more.model, tools: guardTools(tools(ran), a.guard), stopWhen: stepCountIs(3), prompt: "again" });
  assert.deepEqual(ran, ["lookup", "lookup"]);
  assert.match(toolResult(more.prompts[1]!, "b4"), /Reason: terminated\..*The agent is terminated/);
  await verified(a);
});

test("ai-sdk: the service stopped: the tool does not run (fails closed)", { skip }, async () => {
  const own = await startOwnService();
  const a = await createAgent(policy(10), "ai-sdk-down", own.url, own.adminToken);
  await a.guard.agent(); // the agent id is known; then the service goes away
  await own.stop();
  const ran: string[] = [];
  const { model, prompts } = scripted([[{ id: "d1", name: "lookup", args: { q: "x" } }]]);
  await generateText({ model, tools: guardTools(tools(ran), a.guard), stopWhen: stepCountIs(3), prompt: "look" });
  assert.deepEqual(ran, []);
  assert.match(toolResult(prompts[1]!, "d1"), /did not run: the guard could not decide it/);
  // A guard that never reached the service fails closed too.
  const never = new Guard({ url: own.url, token: a.token, timeout: "2s", retries: 0 });
  const m2 = scripted([[{ id: "d2", name: "lookup", args: { q: "y" } }]]);
  await generateText({ model: m2.model, tools: guardTools(tools(ran), never), stopWhen: stepCountIs(3), prompt: "look" });
  assert.deepEqual(ran, []);
  await verifiedAfterRestart(own, a.agent);
});

export type { ModelMessage };
