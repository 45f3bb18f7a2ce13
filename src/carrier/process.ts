// The processing job of a stored carrier event: load it, normalize it through its
// carrier adapter, and hand it to the handler registered for its kind, in one
// transaction that also sets processed_at. Handlers apply guarded transitions and
// say what happened; a refused transition is a normal result. A handler that
// throws rolls everything back, its error is written to carrier_events.error, and
// the job is retried with backoff. An event about a row that does not exist yet
// throws NotReadyError and simply waits its turn the same way.

import type pg from 'pg';
import type { Db } from '../db/pool.js';
import type { Tx } from '../db/tx.js';
import { withTx } from '../db/tx.js';
import type { TaskHandler } from '../jobs/runner.js';
import type { Logger } from '../telemetry/log.js';
import {
  MalformedCarrierEvent,
  type CarrierAdapter,
  type CarrierEvent,
  type CarrierEventKind,
} from './carrier.js';
import { carrierEventLock, carrierEventMarkProcessed, carrierEventRecordError } from './events.sql.js';

declare global {
  namespace GraphileWorker {
    interface Tasks {
      'carrier_event.process': { eventId: string };
    }
  }
}

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
}

export type CarrierEventHandler<K extends CarrierEventKind> = (
  tx: Tx,
  event: Extract<CarrierEvent, { kind: K }>,
  ctx: HandlerContext,
) => Promise<HandlerResult>;

export type HandlerRegistry = { [K in CarrierEventKind]?: CarrierEventHandler<K> };

/** The event is about a row that another transaction has not committed yet. */
export class NotReadyError extends Error {
  override name = 'NotReadyError';
}

// graphile-worker's backoff is exp(attempt) seconds: eight attempts wait about half
// an hour in total, far longer than any dispatcher takes to commit a carrier id.
const NOT_READY_MAX_ATTEMPTS = 8;

export interface ProcessDeps {
  pool: pg.Pool;
  adapters: Record<string, CarrierAdapter>;
  handlers: HandlerRegistry;
  log: Logger;
}

export type ProcessOutcome = HandlerResult['outcome'] | 'already_processed' | 'missing';

/** Applies one stored carrier event. Exported for tests and tools; the job calls it. */
export async function processCarrierEvent(deps: ProcessDeps, eventRowId: string, attempt = 1): Promise<ProcessOutcome> {
  try {
    return await withTx(deps.pool, async (tx) => {
      const row = await carrierEventLock(tx, eventRowId);
      if (!row) return 'missing'; // deleted by retention after it was processed
      if (row.processed_at) return 'already_processed'; // a re-run after commit
      const now = new Date();
      const adapter = deps.adapters[row.carrier];
      if (!adapter) throw new Error(`no adapter for carrier ${row.carrier}`);

      let event: CarrierEvent;
      try {
        event = adapter.parse(row.payload);
      } catch (err) {
        if (!(err instanceof MalformedCarrierEvent)) throw err;
        return reject(deps, tx, eventRowId, now, `malformed: ${err.message}`);
      }
      const handler = deps.handlers[event.kind] as CarrierEventHandler<typeof event.kind> | undefined;
      const result: HandlerResult = handler
        ? await handler(tx, event, { eventRowId, carrier: row.carrier, carrierEventId: row.carrier_event_id, now, attempt })
        : { outcome: 'ignored', reason: `no handler for ${event.kind === 'unknown' ? event.eventType : event.kind}` };
      if (result.outcome === 'rejected') return reject(deps, tx, eventRowId, now, result.reason);
      await carrierEventMarkProcessed(tx, eventRowId, now, null);
      return result.outcome;
    });
  } catch (err) {
    // The handler's transaction rolled back whole; an event that waited long
    // enough for its row is then given up in a statement of its own.
    if (err instanceof NotReadyError && attempt >= NOT_READY_MAX_ATTEMPTS) {
      return reject(deps, deps.pool, eventRowId, new Date(), `gave up after ${attempt} attempts: ${err.message}`);
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
  return async (payload, job) => {
    if (typeof payload?.eventId !== 'string') throw new Error('carrier_event.process: payload.eventId missing');
    await processCarrierEvent(deps, payload.eventId, job.attempts);
  };
}
