// The Vercel AI SDK's loop with every tool guarded by lineage. The model is the
// SDK's own mock, scripted to look something up, try a tool outside the
// policy, and pay (which needs a person): swap in a real model
// (`openai("gpt-5")`, …) and nothing else changes.
import { generateText, stepCountIs, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { z } from "zod";
import { Guard } from "@lineage-guard/client";
import { guardTools, terminated } from "@lineage-guard/client/ai-sdk";
import { demoGuard } from "../setup.mjs";

const guard = await demoGuard(Guard);
const tools = guardTools(
  {
    lookup: tool({ description: "look up an invoice", inputSchema: z.object({ q: z.string() }), execute: async ({ q }) => `invoice ${q}: 120 EUR` }),
    pay: tool({ description: "pay an invoice", inputSchema: z.object({ amount: z.number() }), execute: async ({ amount }) => `paid ${amount}` }),
    delete_all: tool({ description: "delete every invoice", inputSchema: z.object({}), execute: async () => "deleted" }),
  },
  guard,
);

const script = [["lookup", { q: "7" }], ["delete_all", {}], ["pay", { amount: 120 }]];
const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };
let step = 0;
const model = new MockLanguageModelV4({
  doGenerate: async () => {
    const next = script[step++];
    if (!next) return { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop" }, usage, warnings: [] };
    const [name, args] = next;
    return { content: [{ type: "tool-call", toolCallId: `call_${step}`, toolName: name, input: JSON.stringify(args) }], finishReason: { unified: "tool-calls" }, usage, warnings: [] };
  },
});

const result = await generateText({ model, tools, stopWhen: [stepCountIs(10), terminated(guard)], prompt: "pay invoice 7" });
for (const s of result.steps) for (const r of s.toolResults) console.log(`${r.toolName}: ${r.output}`);
