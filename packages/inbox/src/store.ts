// The seam between the inbox and a PostgreSQL driver: a transaction that runs
// the inbox's statements and hands the handler the driver's own handle, so the
// handler's writes and the remembered id commit or roll back together. `pg` is
// built in; another driver (postgres.js, Kysely, Drizzle, Prisma) is a dozen lines.

/** What the inbox needs inside a transaction: run a statement, learn how many rows it changed. */
export interface InboxTx {
  exec(sql: string, params: unknown[]): Promise<number>;
}

export type Isolation = 'read committed' | 'repeatable read' | 'serializable';

export interface TransactionOptions {
  /** Unset: the database's default (READ COMMITTED unless configured otherwise). */
  isolation?: Isolation | undefined;
}

/**
 * Runs `fn` in one transaction: commits when it returns, rolls back and rethrows
 * when it throws (or when the commit fails). `native` is what the handler gets
 * as `tx`: the driver's handle on that same transaction.
 */
export interface InboxStore<Native> {
  transaction<R>(fn: (tx: InboxTx, native: Native) => Promise<R>, options?: TransactionOptions): Promise<R>;
}

/** The part of a `pg` client the inbox uses (a `pg.PoolClient` is one). */
export interface PgClient {
  query(
    query: string | { name: string; text: string; values: unknown[] },
  ): Promise<{ rowCount: number | null; command: string }>;
  release(err?: Error | boolean): void;
}

/** The part of a `pg.Pool` the inbox uses. */
export interface PgPool<Client extends PgClient = PgClient> {
  connect(): Promise<Client>;
}

/**
 * The client type a pool hands out. `pg.Pool` declares connect() twice, the
 * callback form last, and TypeScript infers from the last: read it from there.
 */
export type ClientOf<Pool> = Pool extends {
  connect(callback: (err: never, client: infer Client, done: never) => void): void;
}
  ? Exclude<Client, undefined>
  : Pool extends { connect(): Promise<infer Client> }
    ? Client
    : PgClient;

/** Each transaction on a client of its own from the pool; the handler gets that client. */
export function pgStore<Client extends PgClient>(pool: PgPool<Client>): InboxStore<Client> {
  return {
    async transaction(fn, options) {
      const client = await pool.connect();
      let broken: Error | undefined;
      try {
        await client.query(options?.isolation ? `BEGIN ISOLATION LEVEL ${options.isolation}` : 'BEGIN');
        const exec = async (text: string, values: unknown[]) =>
          (await client.query(values.length > 0 ? { name: statementName(text), text, values } : text)).rowCount ?? 0;
        const result = await fn({ exec }, client);
        // COMMIT of a transaction an error has aborted rolls back without an error: a handler
        // that caught a failed statement and returned has not had its writes (nor the id) kept.
        const commit = await client.query('COMMIT');
        if (commit.command === 'ROLLBACK') throw new AbortedTransactionError();
        return result;
      } catch (err) {
        await client.query('ROLLBACK').catch((e: Error) => {
          broken = e;
        });
        throw err;
      } finally {
        client.release(broken);
      }
    },
  };
}

const names = new Map<string, string>();

/**
 * The inbox's statements with parameters run prepared: each connection parses
 * and plans one once, then only binds and executes it (pg keeps a connection's
 * prepared statements by name, so one text must always have the same name).
 */
function statementName(text: string): string {
  let name = names.get(text);
  if (!name) {
    name = `handset_inbox_${names.size + 1}`;
    names.set(text, name);
  }
  return name;
}

export class AbortedTransactionError extends Error {
  override readonly name = 'AbortedTransactionError';
  constructor() {
    super(
      'the transaction was rolled back at COMMIT: a statement inside it failed (an error the handler caught still aborts the transaction)',
    );
  }
}
