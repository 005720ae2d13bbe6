// The OpenAI Agents SDK's own loop (run with an Agent), driven by a minimal
// Model of its interface, with tool()s guarded by guardTool against the real
// service.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Agent, run, setTracingDisabled, tool, Usage, type Model, type ModelRequest, type ModelResponse } from "@openai/agents";
import { z } from "zod";
import { AgentTerminated } from "../src/index.js";
import { guardTool } from "../src/openai-agents.js";
import { approveWhenPending, createAgent, policy, skip, startOwnService, state, verified, verifiedAfterRestart } from "./helpers.js";

setTracingDisabled(true); // no trace export: nothing leaves the machine

type Call = { id: string; name: string; args: object };

/** Scripted is a Model that makes the given tool calls, one turn each, then says "done"; it keeps every input it got. */
class Scripted implements Model {
  inputs: any[] = [];
  constructor(private steps: Call[][]) {}
  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    this.inputs.push(structuredClone(request.input));
    const calls = this.steps[this.inputs.length - 1];
    const output: any[] = calls
      ? calls.map((c) => ({ type: "function_call", callId: c.id, name: c.name, arguments: JSON.stringify(c.args), status: "completed" }))
      : [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "done" }] }];
    return { usage: new Usage(), output, responseId: `resp_${this.inputs.length}` };
  }
  // eslint-disable-next-line require-yield
  async *getStreamedResponse(): AsyncIterable<any> {
    throw new Error("not streamed in these tests");
  }
}

/** toolResult finds the text the model got back for one call in an input. */
function toolResult(input: any, id: string): string {
  for (const item of Array.isArray(input) ? input : []) {
    if (item.type === "function_call_result" && item.callId === id) {
      const o = item.output;
      return typeof o === "string" ? o : (o?.text ?? JSON.stringify(o));
    }
  }
  throw new Error(`no result for ${id} in ${JSON.stringify(input)}`);
}

function tools(ran: string[]) {
  return {
    lookup: tool({
      name: "lookup",
      description: "look up a thing",
      parameters: z.object({ q: z.string() }),
      execute: async ({ q }) => {
        ran.push("lookup");
        return `found ${q}`;
      },
    }),
    pay: tool({
      name: "pay",
      description: "pay an invoice",
      parameters: z.object({ amount: z.number() }),
      execute: async ({ amount }) => {
        ran.push("pay");
        return `paid ${amount}`;
      },
    }),
    delete_all: tool({
      name: "delete_all",
      description: "delete everything",
      parameters: z.object({}),
      execute: async () => {
        ran.push("delete_all");
        return "deleted";
      },
    }),
  };
}

function agent(model: Model, ran: string[], guard: any, wait?: string) {
  const t = tools(ran);
  return new Agent({
    name: "assistant",
    instructions: "help",
    model,
    tools: [guardTool(t.lookup, guard, { wait }), guardTool(t.pay, guard, { wait }), guardTool(t.delete_all, guard, { wait })],
  });
}

test("openai-agents: allowed runs, denied does not, pending waits for a person", { skip }, async () => {
  const a = await createAgent(policy(10), "openai-agents");
  const ran: string[] = [];
  const model = new Scripted([
    [{ id: "call_lookup_1", name: "lookup", args: { q: "invoice 7" } }],
    [{ id: "call_delete_1", name: "delete_all", args: {} }],
    [{ id: "call_pay_1", name: "pay", args: { amount: 5 } }],
  ]);
  const approved = approveWhenPending(a.agent);
  const result = await run(agent(model, ran, a.guard, "20s"), "pay invoice 7", { maxTurns: 10 });
  assert.equal(await approved, "call_pay_1", "the model's call id is the request id");
  assert.deepEqual(ran, ["lookup", "pay"]);
  assert.equal(toolResult(model.inputs[1], "call_lookup_1"), "found invoice 7");
  const denial = toolResult(model.inputs[2], "call_delete_1");
  console.log(`# openai-agents: the model's view of a denial: ${denial}`);
  assert.match(denial, /delete_all was denied and did not run.*Reason: unlisted_tool\. Scar: moderate \(weight 3\)\. Credits left: 9 of 10\./);
  assert.equal(toolResult(model.inputs[3], "call_pay_1"), "paid 5");
  assert.equal(result.finalOutput, "done");
  await verified(a);
});

test("openai-agents: budget exhausted mid-loop terminates the agent and ends the run", { skip }, async () => {
  const a = await createAgent(policy(2), "openai-agents-budget");
  const ran: string[] = [];
  const model = new Scripted([
    [{ id: "b1", name: "lookup", args: { q: "a" } }],
    [{ id: "b2", name: "lookup", args: { q: "b" } }],
    [{ id: "b3", name: "lookup", args: { q: "c" } }],
    [{ id: "b4", name: "lookup", args: { q: "d" } }],
  ]);
  const err = await run(agent(model, ran, a.guard), "look up four things", { maxTurns: 10 }).then(
    () => assert.fail("the run went on past the termination"),
    (e: any) => e,
  );
  let cause = err;
  while (cause && !(cause instanceof AgentTerminated)) cause = cause.cause ?? cause.error;
  assert.ok(cause instanceof AgentTerminated, `the run ends with AgentTerminated, got ${err}`);
  assert.match(cause.text, /The agent is terminated/);
  assert.deepEqual(ran, ["lookup", "lookup"]);
  assert.equal(model.inputs.length, 3, "no turn after the refused call");
  assert.equal(a.guard.terminated, "budget_exhausted");
  assert.equal((await state(a.agent)).status, "terminated");
  await verified(a);
});

test("openai-agents: the service stopped: the tool does not run (fails closed)", { skip }, async () => {
  const own = await startOwnService();
  const a = await createAgent(policy(10), "openai-agents-down", own.url, own.adminToken);
  await a.guard.agent();
  await own.stop();
  const ran: string[] = [];
  const model = new Scripted([[{ id: "d1", name: "lookup", args: { q: "x" } }]]);
  await run(agent(model, ran, a.guard), "look", { maxTurns: 3 });
  assert.deepEqual(ran, []);
  assert.match(toolResult(model.inputs[1], "d1"), /did not run: the guard could not decide it/);
  await verifiedAfterRestart(own, a.agent);
});
