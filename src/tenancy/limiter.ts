import type { Principal } from "./keys.ts";

/** Which limit refused a request. */
export type LimitKind = "requests" | "tokens" | "concurrency" | "budget";

export interface Refusal {
  limit: LimitKind;
  /** When trying again can succeed, in ms; null: not by waiting (a request larger than the limit, a spent budget). */
  retryAfterMs: number | null;
  message: string;
}

/** A key's standing against its per-minute limits, for OpenAI's `x-ratelimit-*` headers. */
export interface RateState {
  requests?: { limit: number; remaining: number; resetMs: number };
  tokens?: { limit: number; remaining: number; resetMs: number };
}

export type Decision<T> = { ok: true; value: T; state: RateState } | { ok: false; refusal: Refusal; state: RateState };

/** A request being served: counts against the key's concurrency until released (once). */
export interface Lease {
  release(): void;
}

/** Tokens held for a request from admission until it ends, then settled to what it used. */
export interface Reservation {
  settle(usedTokens: number): void;
}

type MaybePromise<T> = T | Promise<T>;

/**
 * Per-key limits: requests and tokens per window (a minute), concurrent requests and a token
 * budget. The in-process implementation below is the default; one over a shared store would let
 * several Plinth instances enforce the same limits, which is why the methods may be asynchronous.
 */
export interface Limiter {
  /**
   * A request of the key arrives: counts against its request rate and, when it may generate
   * (`concurrent`), is checked against its budget and takes one of its concurrent places until the
   * lease is released.
   */
  begin(key: Principal, concurrent?: boolean): MaybePromise<Decision<Lease>>;
  /** The request was admitted with this many tokens at most (prompt + the most it may generate). */
  /** `generates`: the request produces tokens (not an embedding), so a smaller max_tokens would help it. */
  reserve(key: Principal, tokens: number, generates?: boolean): MaybePromise<Decision<Reservation>>;
}

interface TokenEntry {
  at: number;
  tokens: number;
  /** Already out of the window (its tokens no longer count). */
  expired: boolean;
}

interface KeyState {
  requests: number[];
  tokens: TokenEntry[];
  tokenSum: number;
  active: number;
  /** Tokens settled in this process. */
  spent: number;
  /** Tokens held by requests still running (for the budget). */
  held: number;
  /** What the store said the key had used when this process first saw it. */
  usedBefore: number;
}

/**
 * Sliding-window limits kept in this process's memory: each counted request (and each token
 * reservation) stays in its key's window for `windowMs`, so a key can make `rpm` requests in any
 * window of that length, and `Retry-After` is the time until the oldest one leaves it.
 */
export class InProcessLimiter implements Limiter {
  private readonly keys = new Map<string, KeyState>();

  constructor(
    private readonly windowMs = 60_000,
    private readonly now: () => number = Date.now,
  ) {}

  begin(key: Principal, concurrent = true): Decision<Lease> {
    const s = this.stateOf(key);
    const now = this.now();
    this.prune(s, now);
    const { rpm, maxConcurrency, budgetTokens } = key.limits;
    const refuse = (refusal: Refusal): Decision<Lease> => ({ ok: false, refusal, state: this.rateState(key, s, now) });
    if (rpm !== null && s.requests.length >= rpm) {
      return refuse({
        limit: "requests",
        retryAfterMs: Math.max(1, s.requests[0] + this.windowMs - now),
        message: `Rate limit reached for this API key: ${count(rpm, "request")} per ${this.windowWords()}.`,
      });
    }
    if (concurrent && maxConcurrency !== null && s.active >= maxConcurrency) {
      return refuse({
        limit: "concurrency",
        retryAfterMs: 1000,
        message: `This API key already has ${count(s.active, "request")} running, its limit; retry when ${s.active === 1 ? "it has" : "one has"} finished.`,
      });
    }
    // A spent budget refuses what could spend more; reads still answer.
    if (concurrent && budgetTokens !== null && this.budgetLeft(key, s) <= 0) {
      return refuse({ limit: "budget", retryAfterMs: null, message: `This API key has used its budget of ${count(budgetTokens, "token")}.` });
    }
    s.requests.push(now);
    if (concurrent) s.active++;
    let released = !concurrent;
    const lease: Lease = {
      release: () => {
        if (released) return;
        released = true;
        s.active--;
      },
    };
    return { ok: true, value: lease, state: this.rateState(key, s, now) };
  }

  reserve(key: Principal, tokens: number, generates = true): Decision<Reservation> {
    const s = this.stateOf(key);
    const now = this.now();
    this.prune(s, now);
    const { tpm, budgetTokens } = key.limits;
    const refuse = (refusal: Refusal): Decision<Reservation> => ({ ok: false, refusal, state: this.rateState(key, s, now) });
    if (tpm !== null && tokens > tpm) {
      return refuse({
        limit: "tokens",
        retryAfterMs: null,
        message: `This request needs up to ${count(tokens, "token")} (${generates ? "its prompt and max tokens" : "its input"}), more than this API key's ${count(tpm, "token")} per ${this.windowWords()}; ${generates ? "lower max_tokens or send less input" : "send less input"}.`,
      });
    }
    if (tpm !== null && s.tokenSum + tokens > tpm) {
      return refuse({
        limit: "tokens",
        retryAfterMs: Math.max(1, this.timeUntilFree(s, s.tokenSum + tokens - tpm, now)),
        message: `Rate limit reached for this API key: ${count(tpm, "token")} per ${this.windowWords()}; used ${s.tokenSum}, requested ${tokens}.`,
      });
    }
    if (budgetTokens !== null && tokens > this.budgetLeft(key, s)) {
      return refuse({
        limit: "budget",
        retryAfterMs: null,
        message: `This request needs up to ${count(tokens, "token")}, more than the ${Math.max(0, this.budgetLeft(key, s))} left of this API key's budget of ${budgetTokens}; ${generates ? "lower max_tokens or send less input" : "send less input"}.`,
      });
    }
    const entry: TokenEntry = { at: now, tokens, expired: false };
    s.tokens.push(entry);
    s.tokenSum += tokens;
    s.held += tokens;
    let settled = false;
    const reservation: Reservation = {
      settle: (used) => {
        if (settled) return;
        settled = true;
        s.held -= tokens;
        s.spent += used;
        if (!entry.expired) s.tokenSum += used - tokens;
        entry.tokens = used;
      },
    };
    return { ok: true, value: reservation, state: this.rateState(key, s, this.now()) };
  }

  /** The key's standing now (for the headers of a response whose request was not counted). */
  state(key: Principal): RateState {
    const s = this.stateOf(key);
    const now = this.now();
    this.prune(s, now);
    return this.rateState(key, s, now);
  }

  private stateOf(key: Principal): KeyState {
    let s = this.keys.get(key.id);
    if (!s) {
      s = { requests: [], tokens: [], tokenSum: 0, active: 0, spent: 0, held: 0, usedBefore: key.usedTokens };
      this.keys.set(key.id, s);
    }
    return s;
  }

  private budgetLeft(key: Principal, s: KeyState): number {
    return (key.limits.budgetTokens ?? Infinity) - s.usedBefore - s.spent - s.held;
  }

  private prune(s: KeyState, now: number): void {
    const start = now - this.windowMs;
    let r = 0;
    while (r < s.requests.length && s.requests[r] <= start) r++;
    if (r > 0) s.requests.splice(0, r);
    let t = 0;
    while (t < s.tokens.length && s.tokens[t].at <= start) {
      s.tokens[t].expired = true;
      s.tokenSum -= s.tokens[t].tokens;
      t++;
    }
    if (t > 0) s.tokens.splice(0, t);
  }

  /** How long until entries holding at least `excess` tokens have left the window. */
  private timeUntilFree(s: KeyState, excess: number, now: number): number {
    let freed = 0;
    for (const e of s.tokens) {
      freed += e.tokens;
      if (freed >= excess) return e.at + this.windowMs - now;
    }
    return this.windowMs;
  }

  private rateState(key: Principal, s: KeyState, now: number): RateState {
    const out: RateState = {};
    const { rpm, tpm } = key.limits;
    if (rpm !== null) {
      out.requests = {
        limit: rpm,
        remaining: Math.max(0, rpm - s.requests.length),
        resetMs: s.requests.length === 0 ? 0 : s.requests[0] + this.windowMs - now,
      };
    }
    if (tpm !== null) {
      out.tokens = {
        limit: tpm,
        remaining: Math.max(0, tpm - s.tokenSum),
        resetMs: s.tokens.length === 0 ? 0 : s.tokens[0].at + this.windowMs - now,
      };
    }
    return out;
  }

  private windowWords(): string {
    return this.windowMs === 60_000 ? "minute" : `${this.windowMs / 1000} s`;
  }
}

/** "1 request", "2 requests": the limits' messages name counts the user set, 1 included. */
function count(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? "" : "s"}`;
}

/** A duration the way OpenAI's reset headers write it: `20ms`, `1.5s`, `6m0s`. */
export function formatReset(ms: number): string {
  const v = Math.max(0, Math.ceil(ms));
  if (v < 1000) return `${v}ms`;
  // Rounded to tenths of a second before splitting, so 119.96 s is 2m0s, not 1m60s.
  const tenths = Math.round(v / 100);
  const minutes = Math.floor(tenths / 600);
  const seconds = (tenths % 600) / 10;
  return minutes > 0 ? `${minutes}m${seconds}s` : `${seconds}s`;
}

/** OpenAI's rate-limit headers for a key's standing. */
export function rateHeaders(state: RateState): Record<string, string> {
  const h: Record<string, string> = {};
  if (state.requests) {
    h["x-ratelimit-limit-requests"] = String(state.requests.limit);
    h["x-ratelimit-remaining-requests"] = String(state.requests.remaining);
    h["x-ratelimit-reset-requests"] = formatReset(state.requests.resetMs);
  }
  if (state.tokens) {
    h["x-ratelimit-limit-tokens"] = String(state.tokens.limit);
    h["x-ratelimit-remaining-tokens"] = String(state.tokens.remaining);
    h["x-ratelimit-reset-tokens"] = formatReset(state.tokens.resetMs);
  }
  return h;
}
