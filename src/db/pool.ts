// The database connection pool and the small vocabulary every table module uses:
// `Db` (anything that can run a query) and `Tx` (a client inside a transaction).

import pg from 'pg';
import type { Logger } from 'pino';

export type Db = pg.Pool | pg.PoolClient;

// int8 (count(*), sums) as a JS number: our counts stay far below 2^53.
pg.types.setTypeParser(pg.types.builtins.INT8, (v) => Number.parseInt(v, 10));

export interface PoolOptions {
  max?: number;
  applicationName: string;
  log?: Logger;
  /**
   * The longest a statement may run, and a lock be waited for, on these
   * connections (0 or unset: the database's own setting). Sent as startup
   * parameters, so they hold from the first statement of every connection.
   */
  statementTimeoutMs?: number;
  lockTimeoutMs?: number;
  /**
   * Pipeline mode: a statement is written as soon as it is issued, behind those
   * still running, instead of after the previous one's answer. Lets a
   * transaction send what it needs no answer from (SAVEPOINT, RELEASE) in the
   * same round trip as the statement behind it (db/tx.ts).
   */
  pipeline?: boolean;
}

export function createPool(connectionString: string, opts: PoolOptions): pg.Pool {
  const pool = new pg.Pool({
    connectionString,
    max: opts.max ?? 10,
    application_name: opts.applicationName,
    connectionTimeoutMillis: 5_000,
    idleTimeoutMillis: 30_000,
    // A dead TCP peer must not hold a request forever; the carrier retries on 5xx.
    keepAlive: true,
    ...(opts.pipeline ? { pipeline: true } : {}),
    ...(opts.statementTimeoutMs ? { statement_timeout: opts.statementTimeoutMs } : {}),
    ...(opts.lockTimeoutMs ? { lock_timeout: opts.lockTimeoutMs } : {}),
  });
  // An idle client losing its connection must not crash the process; the pool
  // drops it and the next checkout opens a new one. Once the pool is ending, a
  // connection closed under a client is expected (pg resolves end() before its
  // clients have finished closing, and the server may be stopping next): no warning.
  const lost = (msg: string) => (err: Error) =>
    pool.ending ? opts.log?.debug({ err: err.message }, msg) : opts.log?.warn({ err: err.message }, msg);
  pool.on('error', lost('idle database client error'));
  pool.on('connect', (client) => client.on('error', lost('database client error')));
  return pool;
}
