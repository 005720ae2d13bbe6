// @lineage-guard/client/ai-sdk: the guard in front of the Vercel AI SDK's tools
// (`ai` 5 and later): every tool's execute asks the guard first.
import { decide, type Duration, type Guard } from "./index.js";

/** The part of an AI SDK tool the guard wraps (structural, so any `ai` major ≥ 5 fits). */
export interface ExecutableTool {
  execute?: (input: any, options: any) => unknown;
}

export interface GuardToolsOptions {
  /** How long a call that needs a person's approval waits for it before the model is told it is pending (default none). */
  wait?: Duration;
}

/**
 * guardTools returns the same tool set whose execute asks the guard first, with
 * the tool's name and input and the AI SDK's toolCallId as the request id: an
 * allowed call runs the tool once; a denied or still-pending call, or a guard
 * that cannot be reached, does not run it and the model gets one text it can
 * act on as the tool's output. Tools without execute (provider-executed or
 * client-side) are returned unchanged.
 */
export function guardTools<T extends Record<string, ExecutableTool>>(tools: T, guard: Guard, opts: GuardToolsOptions = {}): T {
  const out: Record<string, ExecutableTool> = {};
  for (const [name, t] of Object.entries(tools)) {
    const execute = t.execute;
    if (typeof execute !== "function") {
      out[name] = t;
      continue;
    }
    out[name] = {
      ...t,
      execute: async (input: unknown, options: { toolCallId?: string; abortSignal?: AbortSignal } = {}) => {
        const d = await decide(guard, name, input, options.toolCallId, { wait: opts.wait, signal: options.abortSignal });
        if (!d.allowed) return d.text;
        return execute.call(t, input, options);
      },
    };
  }
  return out as T;
}

/**
 * terminated is a stop condition for generateText/streamText/ToolLoopAgent
 * (`stopWhen: [stepCountIs(10), terminated(guard)]`): the loop ends after the
 * step in which the guard reported the agent terminated.
 */
export function terminated(guard: Guard): () => boolean {
  return () => guard.terminated !== null;
}
