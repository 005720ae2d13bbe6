// LangChain.js's createAgent with every tool call guarded by lineage's
// middleware. The model is LangChain's fake chat model, scripted to look
// something up, try a tool outside the policy, and pay (which needs a person):
// pass a real chat model instead and nothing else changes.
import { AIMessage, createAgent, tool } from "langchain";
import { fakeModel } from "@langchain/core/testing";
import { z } from "zod";
import { Guard } from "@lineage-guard/client";
import { lineageMiddleware } from "@lineage-guard/client/langchain";
import { demoGuard } from "../setup.mjs";

const guard = await demoGuard(Guard);
const tools = [
  tool(async ({ q }) => `invoice ${q}: 120 EUR`, { name: "lookup", description: "look up an invoice", schema: z.object({ q: z.string() }) }),
  tool(async ({ amount }) => `paid ${amount}`, { name: "pay", description: "pay an invoice", schema: z.object({ amount: z.number() }) }),
  tool(async () => "deleted", { name: "delete_all", description: "delete every invoice", schema: z.object({}) }),
];
const model = fakeModel()
  .respondWithTools([{ name: "lookup", args: { q: "7" }, id: "call_1" }])
  .respondWithTools([{ name: "delete_all", args: {}, id: "call_2" }])
  .respondWithTools([{ name: "pay", args: { amount: 120 }, id: "call_3" }])
  .respond(new AIMessage("done"));

const agent = createAgent({ model, tools, middleware: [lineageMiddleware(guard)] });
const { messages } = await agent.invoke({ messages: [{ role: "user", content: "pay invoice 7" }] });
for (const m of messages) if (m.type === "tool") console.log(`${m.name}: ${m.content}`);
