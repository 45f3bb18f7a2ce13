// The database connection pool and the small vocabulary every table module uses:
// `Db` (anything that can run a query) and `Tx` (a client inside a transaction).
// Its connections refuse two things a failover brings: a server that cannot write
// (a standby, reached before the switch to the new primary), and a commit whose
// wait for the synchronous standby was cancelled (committed on this server only).

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

/** A server that says, as it accepts a connection, that it cannot write. */
const READ_ONLY_PARAMETERS: Readonly<Record<string, string>> = {
  in_hot_standby: 'on',
  default_transaction_read_only: 'on',
};

interface ParameterStatus {
  parameterName: string;
  parameterValue: string;
}
interface Notice {
  message?: string;
  detail?: string;
}
interface PendingQuery {
  callback?: (err: Error | null, res?: unknown) => void;
}

/**
 * A cancelled wait for synchronous replication (pg_cancel_backend, or a server
 * shutting down, while a COMMIT waited for the standby): PostgreSQL then answers
 * the COMMIT with success and only this warning, though the standby may not have
 * it; a failover to that standby loses it.
 */
const CANCELLED_SYNC_WAIT = /wait for synchronous replication|committed locally, but might not have been replicated/;

class GuardedClient extends pg.Client {
  private readOnlyServer: string | null = null;

  constructor(config?: string | pg.ClientConfig) {
    super(config);
    // PostgreSQL 14 and later report both at connect, and again when they change (a promotion).
    const connection = (this as unknown as { connection: NodeJS.EventEmitter }).connection;
    connection.on('parameterStatus', (msg: ParameterStatus) => {
      if (!(msg.parameterName in READ_ONLY_PARAMETERS)) return;
      if (msg.parameterValue === READ_ONLY_PARAMETERS[msg.parameterName]) this.readOnlyServer = msg.parameterName;
      else if (this.readOnlyServer === msg.parameterName) this.readOnlyServer = null;
    });
  }

  // @ts-expect-error pg's overloads (promise, callback) are implemented as one, as pg does.
  override connect(callback?: (err: Error | undefined) => void): Promise<void> | undefined {
    const checked = super.connect().then(() => {
      if (this.readOnlyServer === null) return;
      void this.end().catch(() => undefined);
      throw Object.assign(
        new Error(`connected to a server that cannot write (${this.readOnlyServer} is on): a standby`),
        { code: '25006' },
      );
    });
    if (!callback) return checked;
    checked.then(() => callback(undefined), callback);
    return undefined;
  }

  /** Where pg hands out notices: the query being answered fails instead of succeeding. */
  _handleNotice(msg: Notice): void {
    const active = (this as unknown as { _activeQuery?: PendingQuery | null })._activeQuery;
    if (
      CANCELLED_SYNC_WAIT.test(`${msg.message ?? ''} ${msg.detail ?? ''}`) &&
      typeof active?.callback === 'function'
    ) {
      const answer = active.callback;
      const failure = Object.assign(
        new Error(`the commit may not be on the synchronous standby: ${msg.message ?? 'its wait was cancelled'}`),
        { code: '57014' },
      );
      active.callback = (err) => answer(err ?? failure);
    }
    (pg.Client.prototype as unknown as { _handleNotice(m: Notice): void })._handleNotice.call(this, msg);
  }
}

export function createPool(connectionString: string, opts: PoolOptions): pg.Pool {
  const pool = new pg.Pool({
    Client: GuardedClient as unknown as typeof pg.Client,
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
