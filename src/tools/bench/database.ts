// The bench's own database: with DATABASE_URL, a fresh database on that server
// (created at start, dropped at the end, so nothing of anyone else's is touched);
// without it, an embedded PostgreSQL in a temporary directory, durable like a
// production server (fsync and synchronous_commit on). Also the table surgery
// between measurements: emptying the ingest tables and bulk-loading stored
// carrier events with generate_series for the cost-growth figures.

import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type pg from 'pg';
import { createDatabase, dropDatabase } from '../../db/databases.js';
import { startEmbeddedPostgres } from '../../db/embedded.js';
import { migrate } from '../../db/migrate.js';
import { createPool } from '../../db/pool.js';
import type { Logger } from '../../telemetry/log.js';

export interface BenchDatabase {
  url: string;
  kind: 'embedded' | 'DATABASE_URL';
  /** For the bench's own bookkeeping queries (not measured). */
  pool: pg.Pool;
  close(): Promise<void>;
}

export async function openBenchDatabase(log: Logger): Promise<BenchDatabase> {
  const serverUrl = process.env['DATABASE_URL'];
  if (serverUrl) {
    const name = `handset_bench_${process.pid}_${Date.now().toString(36)}`;
    const url = await createDatabase(serverUrl, name);
    const pool = createPool(url, { max: 4, applicationName: 'handset-bench' });
    const close = async () => {
      await pool.end();
      await dropDatabase(serverUrl, name);
    };
    await migrate(pool, log).catch(async (err: unknown) => {
      await close();
      throw err;
    });
    return { url, kind: 'DATABASE_URL', pool, close };
  }

  const stateDir = await mkdtemp(path.join(tmpdir(), 'handset-bench-'));
  const embedded = await startEmbeddedPostgres({ stateDir, log, durable: true, maxConnections: 300 });
  const pool = createPool(embedded.url, { max: 4, applicationName: 'handset-bench' });
  const close = async () => {
    await pool.end();
    await embedded.stop();
    await rm(stateDir, { recursive: true, force: true });
  };
  await migrate(pool, log).catch(async (err: unknown) => {
    await close();
    throw err;
  });
  return { url: embedded.url, kind: 'embedded', pool, close };
}

/**
 * Marks the events ingest stored while no worker ran as processed (a pending
 * event is its own processing job), so a worker started later does not chew
 * through them during a measurement.
 */
export async function settleCarrierEvents(pool: pg.Pool): Promise<number> {
  const { rowCount } = await pool.query('UPDATE carrier_events SET processed_at = now() WHERE processed_at IS NULL');
  return rowCount ?? 0;
}

/**
 * Empties carrier_events and its pending jobs, and flushes what the previous
 * measurement left dirty: every ingest measurement starts from the same table
 * and pays only for the checkpoints its own writes cause.
 */
export async function resetIngestTables(pool: pg.Pool): Promise<void> {
  await pool.query('TRUNCATE carrier_events');
  await checkpoint(pool);
}

/**
 * The join condition from a message (alias `m`) to the carrier events about it
 * (alias `ce`), its receipts: the carrier's subject is the message's carrier id,
 * on the same carrier. One definition for the bench's timings of both.
 */
export const RECEIPTS_OF_MESSAGE = 'ce.carrier = m.carrier AND ce.subject = m.carrier_message_id';

/** CHECKPOINT needs superuser (or pg_checkpoint on 15+); without it the bench goes on regardless. */
export async function checkpoint(pool: pg.Pool): Promise<void> {
  await pool.query('CHECKPOINT').catch(() => undefined);
}

export async function carrierEventCount(pool: pg.Pool): Promise<number> {
  const { rows } = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM carrier_events');
  return rows[0]!.n;
}

/**
 * Bulk-loads processed carrier events with random (UUID) event ids, as months of
 * real traffic would leave them, until the table holds `target` rows. The payload
 * is the given real envelope, so rows have their production width.
 */
export async function fillCarrierEvents(
  pool: pg.Pool,
  target: number,
  payload: string,
): Promise<{ added: number; seconds: number }> {
  const started = performance.now();
  const have = await carrierEventCount(pool);
  let added = 0;
  const chunk = 200_000;
  while (have + added < target) {
    const n = Math.min(chunk, target - have - added);
    await pool.query(
      `INSERT INTO carrier_events (carrier, carrier_event_id, event_type, payload, processed_at, created_at)
       SELECT 'telnyx', gen_random_uuid()::text, 'message.finalized', $1::jsonb, now(), now()
         FROM generate_series(1, $2::int)`,
      [payload, n],
    );
    added += n;
  }
  await pool.query('VACUUM ANALYZE carrier_events');
  // Flush the load now, not in the middle of the next measurement: PostgreSQL's
  // dirty buffers, then (for a server on this machine) the kernel's dirty pages.
  await checkpoint(pool);
  await promisify(execFile)('sync').catch(() => undefined);
  return { added, seconds: (performance.now() - started) / 1000 };
}

/** Sizes of the table and its indexes, in MiB, for the report. */
export async function carrierEventSizes(pool: pg.Pool): Promise<{ tableMiB: number; indexesMiB: number }> {
  const { rows } = await pool.query<{ t: number; i: number }>(
    `SELECT pg_table_size('carrier_events')::float8 / 1048576 AS t, pg_indexes_size('carrier_events')::float8 / 1048576 AS i`,
  );
  return { tableMiB: Math.round(rows[0]!.t), indexesMiB: Math.round(rows[0]!.i) };
}
