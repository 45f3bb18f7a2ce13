// Retry policies, named, in one place. An expected retry (the carrier did not
// answer, an event arrived before the row it is about) is the task re-enqueuing
// itself in its own transaction, with the next attempt number and a delay from its
// policy; graphile-worker's own retry is left for the unexpected (a bug, the
// database going away), and no task decides anything from graphile-worker's
// attempt count. Every wait is by time, counted from a moment stored with the work
// (the event's arrival, the message's creation, the leg's claim), and derived
// from the crash-recovery bound: a wait for something another worker is about to
// do — or to do again after it crashed — must outlast that bound, so it lasts at
// least twice as long.

import type pg from 'pg';
import { withTx } from '../db/tx.js';
import { enqueue, type TaskName } from './enqueue.js';
import { recoveryTimings } from './runner.js';

export interface RetryPolicy {
  /** The wait before attempt `attempt` + 1: doubling from `firstDelayMs`, at most `maxDelayMs`. */
  readonly firstDelayMs: number;
  readonly maxDelayMs: number;
  /** How long after `since` the task stops retrying on its own; null: it never does. */
  readonly giveUpAfterMs: number | null;
}

export type RetryDecision = { retry: true; runAt: Date } | { retry: false };

export const POLICY_NAMES = ['notReady', 'processing', 'dispatch', 'dial', 'command'] as const;
export type PolicyName = (typeof POLICY_NAMES)[number];
export type RetryPolicies = Record<PolicyName, RetryPolicy>;

/**
 * A carrier event whose processing threw (a bug, a constraint, a lock it waited
 * too long for): retried with backoff and never given up, its error on the row
 * for an operator to read, so a fix deployed later still applies it.
 */
export const PROCESSING_POLICY: RetryPolicy = { firstDelayMs: 1_000, maxDelayMs: 5 * 60_000, giveUpAfterMs: null };

/** Telnyx replays a successful response to a repeated Idempotency-Key for 24 h; we stop an hour short of it. */
export const CARRIER_REPLAY_WINDOW_MS = 23 * 3_600_000;

export function retryPolicies(staleAfterMs: number): RetryPolicies {
  const bound = recoveryTimings(staleAfterMs).rerunWithinMs;
  return {
    // An event about a row or an event not applied yet. Polled often enough that the
    // wait ends soon after its dependency lands; the handler decides what "waited
    // long enough" means from `giveUpAfterMs` (and never gives up on a dependency
    // that is stored but unprocessed).
    notReady: { firstDelayMs: 500, maxDelayMs: Math.max(1_000, Math.round(bound / 4)), giveUpAfterMs: 2 * bound },
    processing: PROCESSING_POLICY,
    // A send whose outcome we could not learn is repeated with the same
    // Idempotency-Key for as long as the carrier would replay its answer.
    dispatch: { firstDelayMs: 1_000, maxDelayMs: 5 * 60_000, giveUpAfterMs: CARRIER_REPLAY_WINDOW_MS },
    // A dial is worth repeating only while someone may still be waiting for it; a
    // dial given up on that went through after all is a stray leg, hung up when its
    // webhooks arrive.
    dial: { firstDelayMs: 1_000, maxDelayMs: 8_000, giveUpAfterMs: 2 * bound },
    // hangup / reject / answer / bridge: a leg left up is billed by the carrier, so keep at it.
    command: { firstDelayMs: 1_000, maxDelayMs: 30_000, giveUpAfterMs: 3_600_000 },
  };
}

export function retryDelayMs(policy: RetryPolicy, attempt: number): number {
  return Math.min(policy.maxDelayMs, policy.firstDelayMs * 2 ** Math.max(0, attempt - 1));
}

/**
 * Whether attempt `attempt` (1 = the first), begun at `since`, retries, and when. A
 * carrier's Retry-After stretches the wait, but never past the policy's longest
 * delay; a policy that gives up does so once `since` + `giveUpAfterMs` has passed.
 */
export function decideRetry(
  policy: RetryPolicy,
  o: { attempt: number; since: Date; now: Date; retryAfterMs?: number | null },
): RetryDecision {
  if (policy.giveUpAfterMs !== null && o.now.getTime() - o.since.getTime() >= policy.giveUpAfterMs)
    return { retry: false };
  const base = retryDelayMs(policy, o.attempt);
  const delay = o.retryAfterMs != null ? Math.min(Math.max(o.retryAfterMs, base), policy.maxDelayMs) : base;
  return { retry: true, runAt: new Date(o.now.getTime() + delay) };
}

/** Whether something that arrived at `since` has waited out its policy (a null bound never has). */
export function waitedOut(policy: RetryPolicy, since: Date, now: Date): boolean {
  return policy.giveUpAfterMs !== null && now.getTime() - since.getTime() >= policy.giveUpAfterMs;
}

/** A Retry-After header, in seconds or as an HTTP date, as a wait in ms; null when absent or unreadable. */
export function parseRetryAfter(value: string | null, now = Date.now()): number | null {
  if (!value) return null;
  if (/^\d+$/.test(value.trim())) return Number(value.trim()) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}

/** A task whose payload counts its attempts and carries the moment its policy counts from. */
type Retryable = {
  [K in TaskName]: GraphileWorker.Tasks[K] extends { attempt?: number; since?: string } ? K : never;
}[TaskName];

/**
 * The expected retry of a task: re-enqueues it under its job key, with the next
 * attempt number and `since` kept, when its policy says so; false (nothing
 * enqueued) once the policy gives up.
 */
export async function retryLater<K extends Retryable>(
  pool: pg.Pool,
  policy: RetryPolicy,
  task: K,
  payload: GraphileWorker.Tasks[K],
  jobKey: string,
  opts: { now: Date; retryAfterMs?: number | null },
): Promise<boolean> {
  const p = payload as { attempt?: number; since?: string };
  const attempt = p.attempt ?? 1;
  const since = p.since ?? opts.now.toISOString();
  const next = decideRetry(policy, {
    attempt,
    since: new Date(since),
    now: opts.now,
    retryAfterMs: opts.retryAfterMs ?? null,
  });
  if (!next.retry) return false;
  const again = { ...payload, attempt: attempt + 1, since } as GraphileWorker.Tasks[K];
  await withTx(pool, (tx) => enqueue(tx, task, again, { runAt: next.runAt, jobKey }));
  return true;
}
