// @lineage-guard/client/langchain: the guard in front of LangChain.js 1.x tools:
// guardTool for one tool, lineageMiddleware for every tool call of a
// createAgent agent.
import { ToolMessage } from "@langchain/core/messages";
import { createMiddleware } from "langchain";
import { decide, type Duration, type Guard } from "./index.js";

export interface GuardOptions {
  /** How long a call that needs a person's approval waits for it before the model is told it is pending (default none). */
  wait?: Duration;
}

/** The part of a LangChain tool the guard wraps (StructuredTool, DynamicStructuredTool, tool()). */
export interface ToolLike {
  name: string;
  invoke: (input: any, config?: any) => Promise<any>;
}

/** A tool call as ToolNode passes it to a tool's invoke. */
function asToolCall(input: unknown): { id?: string; args: unknown } | undefined {
  if (input !== null && typeof input === "object" && (input as any).type === "tool_call") {
    return { id: (input as any).id, args: (input as any).args };
  }
  return undefined;
}

/**
 * guardTool returns the tool (a new object whose prototype is the tool) with
 * an invoke that asks the guard first, with the tool's name, the call's args
 * and the tool-call id as the request id. Allowed: the tool runs once.
 * Denied, still pending, or the guard unreachable: it does not run and the
 * model gets one text it can act on as the tool's result.
 */
export function guardTool<T extends ToolLike>(tool: T, guard: Guard, opts: GuardOptions = {}): T {
  const invoke = tool.invoke;
  const guarded: T = Object.create(tool);
  guarded.invoke = async (input: unknown, config?: any) => {
    const call = asToolCall(input);
    const id = call?.id ?? config?.toolCallId ?? config?.toolCall?.id;
    const d = await decide(guard, tool.name, call ? call.args : input, id, { wait: opts.wait, signal: config?.signal });
    if (d.allowed) return invoke.call(guarded, input, config);
    return call?.id ? new ToolMessage({ content: d.text, tool_call_id: call.id, name: tool.name }) : d.text;
  };
  return guarded;
}

/**
 * lineageMiddleware guards every tool call of a createAgent agent
 * (`createAgent({ model, tools, middleware: [lineageMiddleware(guard)] })`):
 * wrapToolCall asks the guard with the call's name, args and id, runs the
 * tool only when allowed and otherwise answers with the text for the model;
 * once the guard reports the agent terminated, the next model call is not
 * made: the agent ends (jumpTo "end").
 */
export function lineageMiddleware(guard: Guard, opts: GuardOptions = {}) {
  return createMiddleware({
    name: "LineageGuard",
    beforeModel: {
      canJumpTo: ["end"],
      hook: () => (guard.terminated !== null ? { jumpTo: "end" as const } : undefined),
    },
    wrapToolCall: async (request, handler) => {
      const tc = request.toolCall;
      const d = await decide(guard, tc.name, tc.args, tc.id, { wait: opts.wait, signal: (request.runtime as any)?.signal });
      if (d.allowed) return handler(request);
      return new ToolMessage({ content: d.text, tool_call_id: tc.id ?? "", name: tc.name, status: "error" });
    },
  });
}
