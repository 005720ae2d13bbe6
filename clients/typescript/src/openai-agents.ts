// @lineage-guard/client/openai-agents: the guard in front of a tool() of the
// OpenAI Agents SDK for JS (@openai/agents).
import { AgentTerminated, decide, type Duration, type Guard } from "./index.js";

/** The part of an Agents SDK FunctionTool the guard wraps (structural: no runtime import of the SDK). */
export interface FunctionToolLike {
  type: "function";
  name: string;
  // details: the SDK's ToolCallDetails (toolCall.callId, signal); any, so every version's tool fits.
  invoke: (runContext: any, input: string, details?: any) => Promise<any>;
}

export interface GuardToolOptions {
  /** How long a call that needs a person's approval waits for it before the model is told it is pending (default none). */
  wait?: Duration;
}

/**
 * guardTool returns the tool with an invoke that asks the guard first, with
 * the tool's name, its JSON arguments and the model's call id (callId) as the
 * request id. Allowed: the tool runs once. Denied, still pending, or the guard
 * unreachable: it does not run and the model gets one text it can act on as the
 * tool's output. A call refused because the agent is terminated throws
 * AgentTerminated, which ends the run (Runner.run rejects with it as the cause).
 */
export function guardTool<T extends FunctionToolLike>(tool: T, guard: Guard, opts: GuardToolOptions = {}): T {
  const invoke = tool.invoke;
  const guarded: T = {
    ...tool,
    invoke: async (runContext: unknown, input: string, details?: { toolCall?: { callId?: string }; signal?: AbortSignal }) => {
      let args: unknown;
      try {
        args = input === "" ? {} : JSON.parse(input);
      } catch {
        args = { input };
      }
      const d = await decide(guard, tool.name, args, details?.toolCall?.callId, { wait: opts.wait, signal: details?.signal });
      if (d.allowed) return invoke.call(tool, runContext, input, details);
      if (d.verdict?.decision === "deny" && d.verdict.reason === "terminated") throw new AgentTerminated(guard.terminated ?? "terminated", d.text);
      return d.text;
    },
  };
  return guarded;
}
