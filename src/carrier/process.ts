// Applying one stored carrier event: load it, normalize it through its carrier
// adapter, and hand it to the handler registered for its kind, in a savepoint of
// a transaction (the relay's batch, carrier/relay.ts) that sets processed_at
// before it commits. Handlers apply guarded transitions and say what happened; a
// refused transition is a normal result. A handler that throws has its changes
// rolled back, and the event is postponed with its error and retried. An event
// about a row or an event that is not there yet throws NotReadyError: the event
// is postponed by the not-ready policy's delay, and the handler sees, each time,
// whether the event has waited out that policy (counted from when it was stored),
// so a wait is by time, not by how often the event happened to run.

import type pg from 'pg';
import { isReadOnly } from '../db/errors.js';
import type { Db } from '../db/pool.js';
import type { Tx } from '../db/tx.js';
import { withTx } from '../db/tx.js';
import { PROCESSING_POLICY, retryDelayMs, waitedOut, type RetryPolicy } from '../jobs/retry.js';
import type { TaskHandler } from '../jobs/runner.js';
import type { Logger } from '../telemetry/log.js';
import { MalformedCarrierEvent, type CarrierEvent, type CarrierEventKind } from './carrier.js';
import { type Carriers, carrierNamed } from './registry.js';
import {
  type CarrierEventRow,
  carrierEventLock,
  carrierEventMarkProcessed,
  carrierEventPendingAbout,
  carrierEventPostpone,
  type Settled,
} from './events.sql.js';

export type HandlerResult =
  | { outcome: 'applied' }
  | { outcome: 'ignored'; reason: string } // nothing left to do (a duplicate, a late word)
  | { outcome: 'rejected'; reason: string }; // can never apply: recorded as the event's error, not retried

export interface HandlerContext {
  /** The carrier_events row id. */
  eventRowId: string;
  carrier: string;
  carrierEventId: string;
  /** The time the processing transaction started; handlers stamp rows with it. */
  now: Date;
  /** 1 on the event's first run; each run that waited or failed adds one. */
  attempt: number;
  /** The event has waited out the not-ready policy since it was stored: a handler may stop waiting. */
  waitedOut: boolean;
  /** Whether a stored, unprocessed event of `kind` about `subject` exists (one this event may depend on). */
  pendingAbout(kind: CarrierEventKind, subject: string): Promise<boolean>;
}

export type CarrierEventHandler<K extends CarrierEventKind> = (
  tx: Tx,
  event: Extract<CarrierEvent, { kind: K }>,
  ctx: HandlerContext,
) => Promise<HandlerResult>;

export type HandlerRegistry = { [K in CarrierEventKind]?: CarrierEventHandler<K> };

/**
 * The event is about a row or an event that is not there (or not applied) yet.
 * `also` runs in the transaction that schedules the next look, for a handler that
 * wants something done meanwhile (ask the carrier).
 */
export class NotReadyError extends Error {
  override name = 'NotReadyError';
  constructor(
    message: string,
    readonly also?: (tx: Tx) => Promise<void>,
  ) {
    super(message);
  }
}

export interface ProcessDeps {
  pool: pg.Pool;
  carriers: Carriers;
  handlers: HandlerRegistry;
  log: Logger;
  /** How an event waits for what it depends on (jobs/retry.ts). */
  notReady: RetryPolicy;
  /** How an event whose processing failed is retried (jobs/retry.ts); PROCESSING_POLICY by default. */
  failed?: RetryPolicy;
  /** The clock; a parameter so tests move time instead of sleeping. */
  now?: () => Date;
}

export type ProcessOutcome = HandlerResult['outcome'] | 'already_processed' | 'missing';
/** What became of one run: applied, ignored or rejected (processed), or postponed (waiting, failed). */
export type RunOutcome = HandlerResult['outcome'] | 'waiting' | 'failed';

/**
 * Runs one stored event in a transaction of its own: what a `carrier_event.process`
 * job enqueued by an earlier release does, and what tests and tools call. The
 * relay runs batches instead (runClaimed).
 */
export async function processCarrierEvent(
  deps: ProcessDeps,
  eventRowId: string,
  attempt?: number,
): Promise<ProcessOutcome | RunOutcome> {
  const clock = deps.now ?? (() => new Date());
  return withTx(deps.pool, async (tx) => {
    const row = await carrierEventLock(tx, eventRowId);
    if (!row) return 'missing'; // deleted by retention after it was processed
    if (row.processed_at) return 'already_processed'; // a re-run after commit
    const now = clock();
    const settled: Settled[] = [];
    const { outcome } = await runClaimed(tx, deps, row, now, settled, attempt);
    await carrierEventMarkProcessed(tx, settled, now);
    return outcome;
  });
}

/** A run's outcome, and when a postponed event (waiting, failed) is due again. */
export interface Run {
  outcome: RunOutcome;
  runAfter: Date | null;
}

/**
 * Runs one event that `tx` holds locked (and found unprocessed), in a savepoint of
 * its own, so that an event that waits or fails rolls back only its own changes:
 * it is then postponed, with its error, in `tx`. An event run to its end (applied,
 * ignored, rejected) joins `settled`, which the caller marks processed in `tx`
 * before it commits: one statement for a whole batch. Throws only when `tx` itself
 * broke (the database went away), which rolls back the whole transaction.
 */
export async function runClaimed(
  tx: Tx,
  deps: ProcessDeps,
  row: CarrierEventRow,
  now: Date,
  settled: Settled[],
  attempt = row.attempts + 1,
): Promise<Run> {
  try {
    const result = await withTx(tx, (sp) => apply(sp, deps, row, now, attempt, settled));
    if (result.outcome === 'rejected')
      deps.log.warn({ eventRowId: row.id, reason: result.reason }, 'carrier event rejected');
    settled.push({ id: row.id, error: result.outcome === 'rejected' ? result.reason : null });
    return { outcome: result.outcome, runAfter: null };
  } catch (err) {
    if (err instanceof NotReadyError) {
      // A handler stops waiting by not throwing once ctx.waitedOut says so.
      const runAfter = new Date(now.getTime() + retryDelayMs(deps.notReady, attempt));
      await carrierEventPostpone(tx, row.id, `waiting: ${err.message}`, runAfter);
      if (err.also) {
        await withTx(tx, err.also).catch((alsoErr: Error) =>
          deps.log.warn({ eventRowId: row.id, err: alsoErr.message }, 'what a waiting event asked for failed'),
        );
      }
      return { outcome: 'waiting', runAfter };
    }
    // The server cannot write (a standby): the batch rolls back and runs again, nothing counted against the event.
    if (isReadOnly(err)) throw err;
    const reason = `${(err as Error).name}: ${(err as Error).message}`;
    deps.log.warn({ eventRowId: row.id, attempt, err: reason }, 'carrier event failed; it will be retried');
    return { outcome: 'failed', runAfter: await postponeFailed(tx, deps, row.id, attempt, reason, now) };
  }
}

/** An event whose run `attempt` failed for `reason`: held back by the processing policy; returns until when. */
export async function postponeFailed(
  db: Db,
  deps: ProcessDeps,
  id: string,
  attempt: number,
  reason: string,
  now: Date,
): Promise<Date> {
  const runAfter = new Date(now.getTime() + retryDelayMs(deps.failed ?? PROCESSING_POLICY, attempt));
  await carrierEventPostpone(db, id, reason, runAfter);
  return runAfter;
}

async function apply(
  tx: Tx,
  deps: ProcessDeps,
  row: CarrierEventRow,
  now: Date,
  attempt: number,
  settled: readonly Settled[],
): Promise<HandlerResult> {
  const adapter = carrierNamed(deps.carriers, row.carrier);
  let event: CarrierEvent;
  try {
    event = adapter.parse(row.payload);
  } catch (err) {
    if (!(err instanceof MalformedCarrierEvent)) throw err;
    return { outcome: 'rejected', reason: `malformed: ${err.message}` };
  }
  const handler = deps.handlers[event.kind] as CarrierEventHandler<typeof event.kind> | undefined;
  const ctx: HandlerContext = {
    eventRowId: row.id,
    carrier: row.carrier,
    carrierEventId: row.carrier_event_id,
    now,
    attempt,
    waitedOut: waitedOut(deps.notReady, row.created_at, now),
    pendingAbout: (kind, subject) =>
      carrierEventPendingAbout(tx, row.carrier, subject, adapter.eventTypes(kind), [
        row.id,
        ...settled.map((e) => e.id),
      ]),
  };
  return handler
    ? handler(tx, event, ctx)
    : { outcome: 'ignored', reason: `no handler for ${event.kind === 'unknown' ? event.eventType : event.kind}` };
}

/** The task for jobs enqueued by a release before the relay; new events need no job. */
export function processCarrierEventTask(deps: ProcessDeps): TaskHandler<'carrier_event.process'> {
  return async (payload) => {
    if (typeof payload?.eventId !== 'string') throw new Error('carrier_event.process: payload.eventId missing');
    await processCarrierEvent(deps, payload.eventId);
  };
}
