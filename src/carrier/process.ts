// The processing job of a stored carrier event: load it, normalize it through its
// carrier adapter, and hand it to the handler registered for its kind, in one
// transaction that also sets processed_at. Handlers apply guarded transitions and
// say what happened; a refused transition is a normal result. A handler that
// throws rolls everything back, its error is written to carrier_events.error, and
// the job is retried. An event about a row or an event that is not there yet
// throws NotReadyError: the job re-enqueues itself after the not-ready policy's
// delay and the handler sees, each time, whether the event has waited out that
// policy (counted from when it was stored) — so a wait is by time, not by how
// often the job happened to run.

import type pg from 'pg';
import type { Db } from '../db/pool.js';
import type { Tx } from '../db/tx.js';
import { withTx } from '../db/tx.js';
import { enqueue } from '../jobs/enqueue.js';
import { jobKeys } from '../jobs/keys.js';
import { decideRetry, waitedOut, type RetryPolicy } from '../jobs/retry.js';
import type { TaskHandler } from '../jobs/runner.js';
import type { Logger } from '../telemetry/log.js';
import { MalformedCarrierEvent, type CarrierEvent, type CarrierEventKind } from './carrier.js';
import { type Carriers, carrierNamed } from './registry.js';
import {
  carrierEventLock,
  carrierEventMarkProcessed,
  carrierEventPendingAbout,
  carrierEventRecordError,
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
  /** 1 on the first run of the processing job. */
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
  /** The clock; a parameter so tests move time instead of sleeping. */
  now?: () => Date;
}

export type ProcessOutcome = HandlerResult['outcome'] | 'already_processed' | 'missing';

/** Applies one stored carrier event. Exported for tests and tools; the job calls it. */
export async function processCarrierEvent(
  deps: ProcessDeps,
  eventRowId: string,
  attempt = 1,
): Promise<ProcessOutcome | 'waiting'> {
  const clock = deps.now ?? (() => new Date());
  try {
    return await withTx(deps.pool, async (tx) => {
      const row = await carrierEventLock(tx, eventRowId);
      if (!row) return 'missing'; // deleted by retention after it was processed
      if (row.processed_at) return 'already_processed'; // a re-run after commit
      const now = clock();
      const adapter = carrierNamed(deps.carriers, row.carrier);

      let event: CarrierEvent;
      try {
        event = adapter.parse(row.payload);
      } catch (err) {
        if (!(err instanceof MalformedCarrierEvent)) throw err;
        return reject(deps, tx, eventRowId, now, `malformed: ${err.message}`);
      }
      const handler = deps.handlers[event.kind] as CarrierEventHandler<typeof event.kind> | undefined;
      const ctx: HandlerContext = {
        eventRowId,
        carrier: row.carrier,
        carrierEventId: row.carrier_event_id,
        now,
        attempt,
        waitedOut: waitedOut(deps.notReady, row.created_at, now),
        pendingAbout: (kind, subject) =>
          carrierEventPendingAbout(tx, row.carrier, subject, adapter.eventTypes(kind), eventRowId),
      };
      const result: HandlerResult = handler
        ? await handler(tx, event, ctx)
        : { outcome: 'ignored', reason: `no handler for ${event.kind === 'unknown' ? event.eventType : event.kind}` };
      if (result.outcome === 'rejected') return reject(deps, tx, eventRowId, now, result.reason);
      await carrierEventMarkProcessed(tx, eventRowId, now, null);
      return result.outcome;
    });
  } catch (err) {
    // The handler's transaction rolled back whole. An event that is not ready
    // looks again later, in a transaction of its own (a handler stops waiting by
    // not throwing once ctx.waitedOut says so).
    if (err instanceof NotReadyError) {
      const now = clock();
      const next = decideRetry({ ...deps.notReady, giveUpAfterMs: null }, { attempt, since: now, now });
      await withTx(deps.pool, async (tx) => {
        await carrierEventRecordError(tx, eventRowId, `waiting: ${err.message}`);
        await enqueue(
          tx,
          'carrier_event.process',
          { eventId: eventRowId, attempt: attempt + 1 },
          {
            runAt: next.retry ? next.runAt : now,
            jobKey: jobKeys.carrierEvent(eventRowId),
          },
        );
        await err.also?.(tx);
      });
      return 'waiting';
    }
    await carrierEventRecordError(deps.pool, eventRowId, `${(err as Error).name}: ${(err as Error).message}`).catch(
      () => undefined, // the database may be what failed; the job retry will record it
    );
    throw err;
  }
}

/** An event that can never apply: marked processed with the reason, never retried. */
async function reject(deps: ProcessDeps, db: Db, eventRowId: string, now: Date, reason: string): Promise<'rejected'> {
  await carrierEventMarkProcessed(db, eventRowId, now, reason);
  deps.log.warn({ eventRowId, reason }, 'carrier event rejected');
  return 'rejected';
}

export function processCarrierEventTask(deps: ProcessDeps): TaskHandler<'carrier_event.process'> {
  return async (payload) => {
    if (typeof payload?.eventId !== 'string') throw new Error('carrier_event.process: payload.eventId missing');
    await processCarrierEvent(deps, payload.eventId, payload.attempt ?? 1);
  };
}
