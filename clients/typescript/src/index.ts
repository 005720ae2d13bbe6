// @lineage-guard/client: the TypeScript client of the lineage guard service
// (docs/typescript.md). No runtime dependency: Node's global fetch.
import { randomUUID } from "node:crypto";
import type { components } from "./wire.js";

/** A verdict of the guard (docs/service.md): generated from the service's OpenAPI document. */
export type Verdict = components["schemas"]["Verdict"];
/** An agent's folded state (GET /v1/agents/{agent}). */
export type State = components["schemas"]["State"];
/** Who a token stands for (GET /v1/whoami). */
export type Principal = components["schemas"]["Principal"];
/** An error answer of the service. */
export type ErrorBody = components["schemas"]["Error"];

/** A duration: milliseconds, or a Go-style string such as "30s", "2m", "1m30s", "500ms". */
export type Duration = number | string;

export interface GuardOptions {
  /** The service's base URL; default $LINEAGE_SERVER. */
  url?: string;
  /** The agent's bearer token; default $LINEAGE_TOKEN. */
  token?: string;
  /** The deadline of one call without a wait (retries included); default 30 s. */
  timeout?: Duration;
  /** How many times a call is tried again after a network error or a 503 (default 3). */
  retries?: number;
  /** The fetch to use (default the global fetch). */
  fetch?: typeof fetch;
}

export interface RequestOptions {
  /** The request id (the idempotency key); default a fresh `lg-<uuid>`. */
  id?: string;
  /** How long to hold a pending verdict for a person's decision (default none). */
  wait?: Duration;
  /** Cancels the call. */
  signal?: AbortSignal;
}

/** GuardError is an error answer of the service that is not a verdict (400, 401, 403, 404, 409, 413, …). */
export class GuardError extends Error {
  readonly status: number;
  readonly code: string;
  readonly body: ErrorBody | undefined;
  constructor(status: number, code: string, message: string, body?: ErrorBody) {
    super(message);
    this.name = "GuardError";
    this.status = status;
    this.code = code;
    this.body = body;
  }
}

/** GuardUnavailable: the service could not be reached or answered 503/429 past every retry and the deadline. */
export class GuardUnavailable extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "GuardUnavailable";
  }
}

/** Denied: authorize's verdict was a deny. */
export class Denied extends Error {
  readonly verdict: Verdict;
  constructor(tool: string, verdict: Verdict) {
    super(`lineage denied ${tool} (request ${verdict.request_id}): ${verdict.reason}`);
    this.name = "Denied";
    this.verdict = verdict;
  }
}

/** PendingTimeout: authorize's verdict was still pending (a person must approve) when its wait ended. */
export class PendingTimeout extends Error {
  readonly requestId: string;
  readonly verdict: Verdict;
  constructor(tool: string, verdict: Verdict) {
    super(`${tool} (request ${verdict.request_id}) waits for a person's approval`);
    this.name = "PendingTimeout";
    this.requestId = verdict.request_id;
    this.verdict = verdict;
  }
}

/** The service's cap on one `?wait=` (docs/service.md); longer waits are several of them. */
export const MAX_SERVER_WAIT_MS = 60_000;
const RETRY_AFTER_CAP_MS = 10_000;

const units: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 };

/** durationMs reads a Duration as milliseconds; a negative or unreadable one is an error. */
export function durationMs(d: Duration): number {
  if (typeof d === "number") {
    if (!Number.isFinite(d) || d < 0) throw new RangeError(`duration ${d}: not a number of milliseconds ≥ 0`);
    return d;
  }
  if (d === "0") return 0;
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h)/gy;
  let total = 0;
  let end = 0;
  for (let m = re.exec(d); m !== null; m = re.exec(d)) {
    total += Number(m[1]) * units[m[2]!]!;
    end = re.lastIndex;
  }
  if (d === "" || end !== d.length) throw new RangeError(`duration ${JSON.stringify(d)}: write it as 30s, 2m, 1m30s or 500ms`);
  return total;
}

const idPattern = /^[A-Za-z0-9._:~-]{1,128}$/;

/** requestId makes an id the service accepts from a framework's tool-call id (kept as is when it already fits): D280 (every call of the TypeScript client carries an id). */
export function requestId(callId: string | undefined): string {
  if (callId === undefined || callId === "") return "lg-" + randomUUID();
  if (idPattern.test(callId) && callId !== "." && callId !== "..") return callId;
  const clean = callId.replace(/[^A-Za-z0-9._:~-]/g, "_");
  return clean.length <= 128 && clean !== "." && clean !== ".." ? clean : "lg-" + randomUUID();
}

const sleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal.reason);
    };
    signal.addEventListener("abort", onAbort, { once: true });
  });

/** Guard asks a lineage guard service before an agent's tool runs. */
export class Guard {
  readonly url: string;
  readonly timeoutMs: number;
  readonly retries: number;
  /** The termination the service last reported for this agent (budget_exhausted, scar_limit_reached, terminated), or null. */
  terminated: string | null = null;
  #token: string;
  #fetch: typeof fetch;
  #agent: Promise<string> | undefined;

  constructor(opts: GuardOptions = {}) {
    const url = opts.url ?? process.env.LINEAGE_SERVER;
    const token = opts.token ?? process.env.LINEAGE_TOKEN;
    if (!url || !/^https?:\/\/[^/]/.test(url)) {
      throw new TypeError(`lineage: ${JSON.stringify(url ?? "")} is not an http(s) URL of a lineage server (set url or $LINEAGE_SERVER)`);
    }
    if (!token) throw new TypeError("lineage: no token (set token or $LINEAGE_TOKEN)");
    this.url = url.replace(/\/+$/, "");
    this.#token = token;
    this.timeoutMs = durationMs(opts.timeout ?? 30_000);
    this.retries = opts.retries ?? 3;
    this.#fetch = opts.fetch ?? globalThis.fetch;
  }

  /** The agent id of the token, from GET /v1/whoami (asked once). */
  agent(signal?: AbortSignal): Promise<string> {
    if (this.#agent === undefined) {
      this.#agent = this.#call<Principal>("GET", "/v1/whoami", undefined, signal).then((p) => {
        if (!p.agent) throw new GuardError(403, "forbidden", `lineage: the token is ${p.role} ${p.name}, not an agent's`);
        return p.agent;
      });
      this.#agent.catch(() => (this.#agent = undefined)); // a failure is asked again next time
    }
    return this.#agent;
  }

  /**
   * request asks the guard to decide one call. It never throws for a verdict: a
   * denial is data. With wait, a pending verdict is held until a person decides
   * it or the wait ends. It throws GuardUnavailable when the service cannot be
   * reached and GuardError for an error answer.
   */
  async request(tool: string, args: Record<string, unknown> = {}, opts: RequestOptions = {}): Promise<Verdict> {
    const id = opts.id ?? requestId(undefined);
    const agent = await this.agent(opts.signal);
    const body = { id, tool, args };
    let v = await this.#call<Verdict>("POST", `/v1/agents/${encodeURIComponent(agent)}/requests`, body, opts.signal);
    this.#see(v);
    if (v.decision === "pending" && opts.wait !== undefined) {
      v = await this.wait(v.request_id, opts.wait, opts.signal);
    }
    return v;
  }

  /** wait holds a pending request until it is decided or wait ends: D282 (a wait longer than the service's). */
  async wait(id: string, wait: Duration, signal?: AbortSignal): Promise<Verdict> {
    const agent = await this.agent(signal);
    const end = Date.now() + durationMs(wait);
    const path = `/v1/agents/${encodeURIComponent(agent)}/requests/${encodeURIComponent(id)}`;
    for (;;) {
      const left = Math.min(end - Date.now(), MAX_SERVER_WAIT_MS);
      const q = left > 0 ? `?wait=${Math.ceil(left)}ms` : "";
      const v = await this.#call<Verdict>("GET", path + q, undefined, signal, Math.max(left, 0));
      this.#see(v);
      if (v.decision !== "pending" || Date.now() >= end) return v;
    }
  }

  /** authorize returns the allow verdict of a call, or throws Denied, PendingTimeout or GuardUnavailable. */
  async authorize(tool: string, args: Record<string, unknown> = {}, opts: RequestOptions = {}): Promise<Verdict> {
    const v = await this.request(tool, args, opts);
    if (v.decision === "allow") return v;
    if (v.decision === "pending") throw new PendingTimeout(tool, v);
    throw new Denied(tool, v);
  }

  /** state returns the agent's folded state (budget, spent, remaining, scars). */
  async state(signal?: AbortSignal): Promise<State> {
    const agent = await this.agent(signal);
    const s = await this.#call<State>("GET", `/v1/agents/${encodeURIComponent(agent)}`, undefined, signal);
    if (s.status === "terminated") this.terminated ??= s.termination ?? "terminated";
    return s;
  }

  #see(v: Verdict) {
    if (v.terminated) this.terminated = v.terminated;
    else if (v.decision === "deny" && v.reason === "terminated") this.terminated ??= "terminated";
  }

  /**
   * call is one logical call: every body carries its id, so every call is safe
   * to repeat; it is retried after network errors and 503s (unknown_outcome
   * included) with backoff, after 429 at Retry-After (capped), all within the
   * deadline (timeout plus the server wait): D281 (what the TypeScript client
   * retries).
   */
  async #call<T>(method: string, path: string, body: unknown, signal?: AbortSignal, serverWaitMs = 0): Promise<T> {
    const deadline = AbortSignal.timeout(this.timeoutMs + serverWaitMs);
    const sig = signal ? AbortSignal.any([signal, deadline]) : deadline;
    const headers: Record<string, string> = { authorization: `Bearer ${this.#token}`, accept: "application/json" };
    const payload = body === undefined ? undefined : JSON.stringify(body);
    if (payload !== undefined) headers["content-type"] = "application/json";
    let backoff = 100;
    let lastErr = "";
    for (let attempt = 0; ; attempt++) {
      let res: Response;
      try {
        res = await this.#fetch(this.url + path, { method, headers, body: payload, signal: sig });
      } catch (err) {
        if (signal?.aborted) throw err;
        lastErr = deadline.aborted ? `no answer within the deadline` : String((err as Error)?.cause ?? err);
        if (deadline.aborted || attempt >= this.retries) {
          throw new GuardUnavailable(`lineage: ${method} ${this.url}${path}: ${lastErr}`, { cause: err });
        }
        await this.#pause(backoff, sig, method, path, lastErr);
        backoff *= 2;
        continue;
      }
      if (res.ok) return (await res.json()) as T;
      const text = await res.text();
      let eb: ErrorBody | undefined;
      try {
        eb = JSON.parse(text) as ErrorBody;
      } catch {
        eb = undefined;
      }
      const code = eb?.code ?? `http_${res.status}`;
      const message = eb?.message ?? `HTTP ${res.status}: ${text.slice(0, 200)}`;
      if (res.status === 503 || res.status === 429) {
        lastErr = `${res.status} ${code}: ${message}`;
        let pause = backoff;
        if (res.status === 429) {
          const ra = Number(res.headers.get("retry-after"));
          pause = Number.isFinite(ra) && ra > 0 ? Math.min(ra * 1000, RETRY_AFTER_CAP_MS) : backoff;
        }
        if (attempt >= this.retries) throw new GuardUnavailable(`lineage: ${method} ${path}: ${lastErr}`);
        await this.#pause(pause, sig, method, path, lastErr);
        backoff *= 2;
        continue;
      }
      throw new GuardError(res.status, code, `lineage: ${method} ${path}: ${message}`, eb);
    }
  }

  async #pause(ms: number, sig: AbortSignal, method: string, path: string, lastErr: string) {
    try {
      await sleep(ms, sig);
    } catch (err) {
      throw new GuardUnavailable(`lineage: ${method} ${this.url}${path}: ${lastErr}; then the deadline passed`, { cause: err });
    }
  }
}

/** What the model is told when a call did not run: D283 (the text a model gets for a call that did not run). */
export interface Outcome {
  tool: string;
  verdict: Verdict;
  state?: State;
}

/**
 * verdictText is the one text a model receives for a call that did not run:
 * the tool, the decision and its reason, the scar, the credits left, and for a
 * pending call that a person must approve and the request id.
 */
export function verdictText({ tool, verdict: v, state }: Outcome): string {
  const credits = state ? ` Credits left: ${state.remaining} of ${state.budget}.` : "";
  if (v.decision === "pending") {
    return (
      `lineage: the call to ${tool} did not run: a person must approve it (request ${v.request_id}, reason ${v.reason}).` +
      ` Do not call it again; tell the user it waits for approval of request ${v.request_id}.${credits}`
    );
  }
  const scar = v.scar ? `${v.scar.severity} (weight ${v.scar.weight})` : "none";
  let text = `lineage: the call to ${tool} was denied and did not run (request ${v.request_id}). Reason: ${v.reason}. Scar: ${scar}.${credits}`;
  const term = v.terminated ?? (v.reason === "terminated" ? "terminated" : null);
  if (term) text += ` The agent is terminated (${term}): no tool call will be allowed any more; stop and report to the user.`;
  else text += " Do not repeat this call; choose another action or report to the user.";
  return text;
}

/** AgentTerminated ends a framework's agent loop when the guard has terminated the agent. */
export class AgentTerminated extends Error {
  readonly termination: string;
  readonly text: string;
  constructor(termination: string, text: string) {
    super(text);
    this.name = "AgentTerminated";
    this.termination = termination;
    this.text = text;
  }
}

/**
 * decide is what every adapter does before a tool runs: ask the guard (with the
 * framework's tool-call id as the request id), and return either null (the
 * call is allowed: run the tool once) or the text for the model (denied,
 * pending, or the guard unreachable: fail closed).
 */
export async function decide(
  guard: Guard,
  tool: string,
  args: unknown,
  callId: string | undefined,
  opts: { wait?: Duration; signal?: AbortSignal } = {},
): Promise<{ allowed: true; verdict: Verdict } | { allowed: false; text: string; verdict?: Verdict }> {
  // D287 (a tool input that is not an object).
  const a = args !== null && typeof args === "object" && !Array.isArray(args) ? (args as Record<string, unknown>) : { input: args };
  let v: Verdict;
  try {
    v = await guard.request(tool, a, { id: requestId(callId), wait: opts.wait, signal: opts.signal });
  } catch (err) {
    const why = err instanceof Error ? err.message : String(err);
    // D284 (an adapter fails closed without throwing).
    return { allowed: false, text: `lineage: the call to ${tool} did not run: the guard could not decide it (${why}). Try again later or report to the user.` };
  }
  if (v.decision === "allow") return { allowed: true, verdict: v };
  let state: State | undefined;
  try {
    state = await guard.state(opts.signal);
  } catch {
    state = undefined; // the text then leaves the credits out
  }
  return { allowed: false, text: verdictText({ tool, verdict: v, state }), verdict: v };
}
