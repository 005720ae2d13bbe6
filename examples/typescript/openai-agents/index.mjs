// The OpenAI Agents SDK's loop with its tools guarded by lineage. The model is
// a minimal Model of the SDK's interface, scripted to look something up, try a
// tool outside the policy, and pay (which needs a person): give the Agent a
// real model name instead and nothing else changes.
import { Agent, run, setTracingDisabled, tool, Usage } from "@openai/agents";
import { z } from "zod";
import { Guard } from "@lineage-guard/client";
import { guardTool } from "@lineage-guard/client/openai-agents";
import { demoGuard } from "../setup.mjs";

setTracingDisabled(true);
const guard = await demoGuard(Guard);
const tools = [
  tool({ name: "lookup", description: "look up an invoice", parameters: z.object({ q: z.string() }), execute: async ({ q }) => `invoice ${q}: 120 EUR` }),
  tool({ name: "pay", description: "pay an invoice", parameters: z.object({ amount: z.number() }), execute: async ({ amount }) => `paid ${amount}` }),
  tool({ name: "delete_all", description: "delete every invoice", parameters: z.object({}), execute: async () => "deleted" }),
].map((t) => guardTool(t, guard));

const script = [["lookup", { q: "7" }], ["delete_all", {}], ["pay", { amount: 120 }]];
let turn = 0;
const model = {
  async getResponse() {
    const next = script[turn++];
    const output = next
      ? [{ type: "function_call", callId: `call_${turn}`, name: next[0], arguments: JSON.stringify(next[1]), status: "completed" }]
      : [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "done" }] }];
    return { usage: new Usage(), output };
  },
  async *getStreamedResponse() {
    throw new Error("not streamed");
  },
};

const result = await run(new Agent({ name: "invoices", instructions: "pay invoices", model, tools }), "pay invoice 7");
for (const item of result.newItems) if (item.type === "tool_call_output_item") console.log(`${item.rawItem.name}: ${item.output}`);
