// onRollback keeps state held in memory beside a transaction true to it: what a
// rolled-back savepoint (or transaction) wrote is undone in memory too, and what
// a released savepoint wrote stays until the level around it rolls back. On a
// pipelining connection, what a transaction needs no answer to goes out with the
// statement behind it, and a failure among those still stops the commit.

import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPool } from '../../src/db/pool.js';
import { onRollback, together, withTx } from '../../src/db/tx.js';
import { createTestDatabase, type TestDatabase } from '../support/db.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
  await db.pool.query('CREATE TABLE kept (n int)');
  await db.pool.query('CREATE SEQUENCE order_seen');
});
afterAll(async () => {
  await db.drop();
});

const fails = new Error('rolled back on purpose');

describe('onRollback', () => {
  it('a committed transaction undoes nothing, however its savepoints went', async () => {
    const undone: string[] = [];
    await withTx(db.pool, async (tx) => {
      onRollback(tx, () => undone.push('top'));
      await withTx(tx, async (sp) => onRollback(sp, () => undone.push('released')));
    });
    expect(undone).toEqual([]);
  });

  it('a savepoint rolled back undoes what was noted in it and in the savepoints inside it, and nothing around it', async () => {
    const undone: string[] = [];
    await withTx(db.pool, async (tx) => {
      onRollback(tx, () => undone.push('before'));
      await withTx(tx, async (sp) => {
        onRollback(sp, () => undone.push('inside'));
        await withTx(sp, async (inner) => onRollback(inner, () => undone.push('released inside')));
        throw fails;
      }).catch(() => undefined);
      onRollback(tx, () => undone.push('after'));
    });
    expect(undone.sort()).toEqual(['inside', 'released inside']);
  });

  it('what a released savepoint noted is undone when the transaction around it rolls back', async () => {
    const undone: string[] = [];
    await withTx(db.pool, async (tx) => {
      await withTx(tx, async (sp) => onRollback(sp, () => undone.push('released')));
      onRollback(tx, () => undone.push('top'));
      throw fails;
    }).catch(() => undefined);
    expect(undone.sort()).toEqual(['released', 'top']);
  });
});

/** A pool of one connection, pipelining or not, and how many writes its socket has made since `reset`. */
async function countingWrites(pipeline: boolean): Promise<{ pool: pg.Pool; writes: () => number; reset(): void }> {
  const pool = createPool(db.url, { max: 1, applicationName: 'handset-tx-test', pipeline });
  let writes = 0;
  pool.on('connect', (client) => {
    type Write = (...args: unknown[]) => unknown;
    const socket = (client as unknown as { connection: { stream: { _write: Write; _writev: Write } } }).connection
      .stream;
    for (const key of ['_write', '_writev'] as const) {
      const original = socket[key];
      socket[key] = function (this: unknown, ...args: unknown[]) {
        writes++;
        return original.apply(this, args);
      };
    }
  });
  await pool.query('SELECT 1'); // connected: the start-up's writes are not counted
  return {
    pool,
    writes: () => writes,
    reset: () => {
      writes = 0;
    },
  };
}

describe('withTx on a pipelining connection', () => {
  const work = (pool: pg.Pool) =>
    withTx(pool, async (tx) => {
      await withTx(tx, (sp) => sp.query('INSERT INTO kept VALUES (1)'));
      await tx.query('INSERT INTO kept VALUES (2)');
    });

  it('BEGIN, SAVEPOINT and RELEASE go out in the writes of the statements behind them', async () => {
    for (const pipeline of [false, true]) {
      const { pool, writes, reset } = await countingWrites(pipeline);
      reset();
      await work(pool);
      // One write per statement; pipelining: [BEGIN SAVEPOINT INSERT] [RELEASE INSERT] [COMMIT].
      expect(writes(), pipeline ? 'pipelining' : 'not pipelining').toBe(pipeline ? 3 : 6);
      await pool.end();
    }
    expect((await db.pool.query('SELECT n FROM kept ORDER BY n')).rows).toEqual([
      { n: 1 },
      { n: 1 },
      { n: 2 },
      { n: 2 },
    ]);
  });

  it('a savepoint that could not open fails its transaction, which does not commit quietly', async () => {
    const { pool } = await countingWrites(true);
    try {
      const done = withTx(pool, async (tx) => {
        await tx.query('SELECT 1 / 0').catch(() => undefined); // a failure swallowed: the transaction is aborted
        // Neither SAVEPOINT nor RELEASE had its answer awaited; COMMIT in an aborted
        // transaction rolls back without an error, so only their answers can tell.
        await withTx(tx, async () => 'nothing to write');
      });
      await expect(done).rejects.toThrow(/current transaction is aborted/);
    } finally {
      await pool.end();
    }
  });
});

describe('together', () => {
  it('its steps go out in one write on a pipelining connection, and run in order either way', async () => {
    for (const pipeline of [false, true]) {
      const { pool, writes, reset } = await countingWrites(pipeline);
      const seen = await withTx(pool, async (tx) => {
        await tx.query('SELECT 1'); // BEGIN went with this
        reset();
        const [a, b] = await together(
          tx,
          () => tx.query<{ n: number }>(`SELECT nextval('order_seen') AS n`),
          () => tx.query<{ n: number }>(`SELECT nextval('order_seen') AS n`),
        );
        expect(writes(), pipeline ? 'pipelining' : 'not pipelining').toBe(pipeline ? 1 : 2);
        return [a.rows[0]!.n, b.rows[0]!.n];
      });
      expect(seen[1]).toBe(seen[0]! + 1);
      await pool.end();
    }
  });

  it('throws the error of the step that failed, not the aborted transaction the steps behind it found', async () => {
    for (const pipeline of [false, true]) {
      const { pool } = await countingWrites(pipeline);
      const done = withTx(pool, (tx) =>
        together(
          tx,
          // Pipelining, this step's second statement goes out after the next step's failed.
          async () => {
            await tx.query('SELECT 1');
            await tx.query('SELECT 2');
          },
          () => tx.query('SELECT 1 / 0'),
          () => tx.query('SELECT 3'),
        ),
      );
      await expect(done, pipeline ? 'pipelining' : 'not pipelining').rejects.toThrow(/division by zero/);
      await pool.end();
    }
  });
});
