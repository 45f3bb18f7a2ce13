// What PostgreSQL itself can do with ingest's SQL on this machine, driven over
// `pg` from Node with no HTTP, no signature and no JSON parse in between, at the
// same concurrency as the HTTP load (one connection per concurrent caller):
//
//   A  ingest's own write path, imported, not copied: the CarrierEventWriter
//      (group commit) over carrierEventStoreMany from src/carrier/events.sql.ts,
//      so it is the exact SQL (the INSERT … ON CONFLICT plus the job enqueue,
//      one statement) and the exact batching, whatever those modules do today;
//   A1 the same statement with one event per transaction (no group commit):
//      what ingest did before, and what any one-webhook-one-transaction design costs;
//   B  the bare INSERT … ON CONFLICT DO NOTHING, one per transaction: the floor
//      PostgreSQL sets for a design without a queue;
//   N  the bare INSERT plus a pg_notify in the same statement: what the
//      notification alone costs, to tell it apart from the rest of add_job.

import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { carrierEventStore } from '../../carrier/events.sql.js';
import { createPool } from '../../db/pool.js';
import { CarrierEventWriter } from '../../ingest/group-commit.js';
import type { LoadResult } from './http-load.js';
import { Latencies } from './stats.js';

export type Statement = 'A' | 'A1' | 'B' | 'N';

export interface StatementOptions {
  databaseUrl: string;
  statement: Statement;
  concurrency: number;
  seconds: number;
  /** Unmeasured seconds first, after every connection is open. */
  warmup: number;
  /** The stored body for an event id (the same bytes ingest would store). */
  body: (eventId: string) => string;
  /** Replay these event ids (duplicates) instead of new ones. */
  replay?: string[];
  /** A only: this many independent writers (as in that many ingest processes), callers spread over them. */
  writers?: number;
  /** Called when the measured part starts, and when it ends (before the connections close). */
  onStart?: () => void;
  onEnd?: () => void;
}

type Op = (eventId: string, body: string, caller: number) => Promise<unknown>;

const OPS: Record<Statement, (pool: pg.Pool, writers: number) => Op> = {
  A: (pool, writers) => {
    const all = Array.from({ length: writers }, () => new CarrierEventWriter(pool));
    return (id, body, caller) =>
      all[caller % writers]!.store({
        carrier: 'telnyx',
        carrierEventId: id,
        eventType: 'message.finalized',
        subject: id,
        rawJson: body,
      });
  },
  A1: (pool) => (id, body) =>
    carrierEventStore(pool, {
      carrier: 'telnyx',
      carrierEventId: id,
      eventType: 'message.finalized',
      subject: id,
      rawJson: body,
    }),
  B: (pool) => (id, body) =>
    pool.query({
      name: 'bench_bare_insert',
      text: `INSERT INTO carrier_events (carrier, carrier_event_id, event_type, payload)
             VALUES ($1, $2, $3, $4::jsonb)
             ON CONFLICT (carrier, carrier_event_id) DO NOTHING
             RETURNING id`,
      values: ['telnyx', id, 'message.finalized', body],
    }),
  N: (pool) => (id, body) =>
    pool.query({
      name: 'bench_insert_notify',
      text: `WITH ins AS (
               INSERT INTO carrier_events (carrier, carrier_event_id, event_type, payload)
               VALUES ($1, $2, $3, $4::jsonb)
               ON CONFLICT (carrier, carrier_event_id) DO NOTHING
               RETURNING id
             )
             SELECT pg_notify('handset_bench', ins.id) FROM ins`,
      values: ['telnyx', id, 'message.finalized', body],
    }),
};

/** Runs `statement` from `concurrency` loops for `seconds`, after a short warm-up of the connections. */
export async function runStatement(opts: StatementOptions): Promise<LoadResult> {
  const pool = createPool(opts.databaseUrl, { max: opts.concurrency, applicationName: 'handset-bench-baseline' });
  const op = OPS[opts.statement](pool, opts.writers ?? 1);
  try {
    // Open every connection (and prepare the statement on it) before the clock starts.
    await Promise.all(
      Array.from({ length: opts.concurrency }, async (_, caller) => {
        const id = `warmup-${randomUUID()}`;
        await op(id, opts.body(id), caller);
      }),
    );
    let replayAt = 0;
    const nextId = opts.replay ? () => opts.replay![replayAt++ % opts.replay!.length]! : () => randomUUID();
    const loops = async (seconds: number, latencies: Latencies) => {
      let errors = 0;
      const deadline = performance.now() + seconds * 1000;
      await Promise.all(
        Array.from({ length: opts.concurrency }, async (_, caller) => {
          while (performance.now() < deadline) {
            const id = nextId();
            const body = opts.body(id);
            const t = performance.now();
            try {
              await op(id, body, caller);
              latencies.record(performance.now() - t);
            } catch {
              errors++;
            }
          }
        }),
      );
      return errors;
    };
    if (opts.warmup > 0) await loops(opts.warmup, new Latencies());
    const latencies = new Latencies();
    opts.onStart?.();
    const started = performance.now();
    const errors = await loops(opts.seconds, latencies);
    const seconds = (performance.now() - started) / 1000;
    opts.onEnd?.();
    return {
      requests: latencies.count,
      seconds,
      rate: latencies.count / seconds,
      statuses: {},
      errors,
      latency: latencies.summary(),
      exhausted: false,
    };
  } finally {
    await pool.end();
  }
}
