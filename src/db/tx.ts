// withTx is the one way to run a transaction. Given a pool it checks out a client
// and runs BEGIN … COMMIT (ROLLBACK on any throw); given a Tx it nests with a
// SAVEPOINT, so code that takes a transaction composes inside a caller's one.

import type pg from 'pg';
import type { Db } from './pool.js';

declare const txBrand: unique symbol;
/** A client inside a transaction. Functions that write take it first. */
export type Tx = pg.PoolClient & { readonly [txBrand]: true };

const depth = new WeakMap<pg.PoolClient, number>();
/** Per open transaction, per level (0: the transaction, then each savepoint): what onRollback asked to undo. */
const undos = new WeakMap<pg.PoolClient, (() => void)[][]>();

/**
 * Runs `undo` if what `tx` has written so far at its current level is rolled
 * back: by its savepoint, by any savepoint around it, or with the transaction.
 * For state held in memory beside a transaction that must stay true to it.
 */
export function onRollback(tx: Tx, undo: () => void): void {
  undos.get(tx)?.at(-1)?.push(undo);
}

function undoLevel(client: pg.PoolClient): void {
  for (const undo of undos.get(client)?.pop() ?? []) undo();
}

export function isTx(db: Db): db is Tx {
  return depth.has(db as pg.PoolClient);
}

export async function withTx<T>(db: pg.Pool | Tx, fn: (tx: Tx) => Promise<T>): Promise<T> {
  if (isTx(db)) return withSavepoint(db, fn);
  const client = await (db as pg.Pool).connect();
  let broken: Error | undefined;
  try {
    await client.query('BEGIN');
    depth.set(client, 0);
    undos.set(client, [[]]);
    try {
      const result = await fn(client as Tx);
      await client.query('COMMIT');
      return result;
    } catch (err) {
      undoLevel(client); // each savepoint undid its own level as it failed: this is the transaction's
      await client.query('ROLLBACK').catch((rollbackErr: Error) => {
        broken = rollbackErr; // the connection is unusable; destroy it on release
      });
      throw err;
    }
  } finally {
    depth.delete(client);
    undos.delete(client);
    client.release(broken);
  }
}

async function withSavepoint<T>(tx: Tx, fn: (tx: Tx) => Promise<T>): Promise<T> {
  const level = (depth.get(tx) ?? 0) + 1;
  const name = `sp_${level}`;
  await tx.query(`SAVEPOINT ${name}`);
  depth.set(tx, level);
  undos.get(tx)?.push([]);
  try {
    const result = await fn(tx);
    await tx.query(`RELEASE SAVEPOINT ${name}`);
    // Released into the level around it: undone if that level rolls back.
    const levels = undos.get(tx);
    const released = levels?.pop() ?? [];
    levels?.at(-1)?.push(...released);
    return result;
  } catch (err) {
    undoLevel(tx); // its writes are gone whether or not the rollback itself succeeds
    await tx.query(`ROLLBACK TO SAVEPOINT ${name}`);
    throw err;
  } finally {
    depth.set(tx, level - 1);
  }
}
