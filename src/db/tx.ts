// withTx is the one way to run a transaction. Given a pool it checks out a client
// and runs BEGIN … COMMIT (ROLLBACK on any throw); given a Tx it nests with a
// SAVEPOINT, so code that takes a transaction composes inside a caller's one.
// On a pipelining connection (db/pool.ts) what needs no answer (BEGIN, SAVEPOINT,
// RELEASE) goes out with the statement behind it, and `together` sends statements
// that need nothing of each other's answers in one round trip: a worker's
// transactions are long chains of one-row statements, and on loopback each
// round trip's writes and wake-ups cost more CPU than the statement itself.

import type pg from 'pg';
import { isReadOnly } from './errors.js';
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

/**
 * Per open transaction on a pipelining connection: statements sent without
 * waiting for their answer (BEGIN, SAVEPOINT, RELEASE). Each statement behind
 * one fails if it failed, except COMMIT, which on a failed transaction rolls
 * back without an error; so COMMIT waits for them first.
 */
const unanswered = new WeakMap<pg.PoolClient, Promise<unknown>[]>();

/**
 * On a pipelining connection, sends `sql` without waiting for its answer, held
 * with the statements issued right behind it, so they go out in one write: a
 * write to a socket costs about as much CPU as running a one-row statement.
 */
async function send(client: pg.PoolClient, sql: string): Promise<void> {
  const sent = unanswered.get(client);
  if (!sent) {
    await client.query(sql);
    return;
  }
  holdWrites(client);
  const answer = client.query(sql);
  answer.catch(() => undefined); // awaited before COMMIT, and the statement behind it fails too
  sent.push(answer);
}

/** Connections whose writes are held until the code running now has issued what it will. */
const holding = new WeakSet<pg.PoolClient>();

function holdWrites(client: pg.PoolClient): void {
  const stream = (client as unknown as { connection?: { stream?: { cork?(): void; uncork?(): void } } }).connection
    ?.stream;
  if (!stream?.cork || !stream.uncork || holding.has(client)) return;
  holding.add(client);
  stream.cork();
  // After the promise jobs now queued have run: the statement the caller issues next is among them.
  process.nextTick(() => {
    holding.delete(client);
    stream.uncork!();
  });
}

/** Waits for what was sent unanswered; throws the first failure. */
async function answered(client: pg.PoolClient): Promise<void> {
  const sent = unanswered.get(client);
  if (!sent?.length) return;
  const all = sent.splice(0);
  await Promise.all(all);
}

function pipelining(client: pg.PoolClient): boolean {
  return (client as unknown as { pipeline?: boolean }).pipeline === true;
}

/**
 * Runs statements that do not depend on one another's answers, in order: on a
 * pipelining connection they go out in one write and are answered in one round
 * trip (each step's first statement; a step that goes on after its answer goes
 * on concurrently with the others), elsewhere one after another. A failure fails
 * the statements behind it too, with "transaction aborted"; the error thrown is
 * the one that caused it.
 */
export async function together<T extends readonly (() => Promise<unknown>)[]>(
  tx: Tx,
  ...steps: T
): Promise<{ -readonly [K in keyof T]: Awaited<ReturnType<T[K]>> }> {
  type Results = { -readonly [K in keyof T]: Awaited<ReturnType<T[K]>> };
  if (!unanswered.has(tx)) {
    const results: unknown[] = [];
    for (const step of steps) results.push(await step());
    return results as Results;
  }
  holdWrites(tx);
  // Every step settles before anything is thrown: none is left issuing statements behind a rollback.
  const settled = await Promise.allSettled(steps.map((step) => step()));
  const failures = settled.flatMap((r) => (r.status === 'rejected' ? [r.reason as { code?: string }] : []));
  // What failed first, rather than what then found the transaction aborted (25P02).
  const cause = failures.find((f) => f?.code !== '25P02') ?? failures[0];
  if (failures.length > 0) throw cause;
  return settled.map((r) => (r as PromiseFulfilledResult<unknown>).value) as Results;
}

export function isTx(db: Db): db is Tx {
  return depth.has(db as pg.PoolClient);
}

export async function withTx<T>(db: pg.Pool | Tx, fn: (tx: Tx) => Promise<T>): Promise<T> {
  if (isTx(db)) return withSavepoint(db, fn);
  const client = await (db as pg.Pool).connect();
  let broken: Error | undefined;
  try {
    if (pipelining(client)) unanswered.set(client, []);
    await send(client, 'BEGIN');
    depth.set(client, 0);
    undos.set(client, [[]]);
    try {
      const result = await fn(client as Tx);
      await answered(client);
      await client.query('COMMIT');
      return result;
    } catch (err) {
      undoLevel(client); // each savepoint undid its own level as it failed: this is the transaction's
      // A connection on a server that cannot write is of no use to anyone: destroyed on release.
      if (isReadOnly(err)) broken = err as Error;
      await client.query('ROLLBACK').catch((rollbackErr: Error) => {
        broken = rollbackErr; // the connection is unusable; destroy it on release
      });
      throw err;
    }
  } finally {
    depth.delete(client);
    undos.delete(client);
    unanswered.delete(client);
    client.release(broken);
  }
}

async function withSavepoint<T>(tx: Tx, fn: (tx: Tx) => Promise<T>): Promise<T> {
  const level = (depth.get(tx) ?? 0) + 1;
  const name = `sp_${level}`;
  await send(tx, `SAVEPOINT ${name}`);
  depth.set(tx, level);
  undos.get(tx)?.push([]);
  try {
    const result = await fn(tx);
    await send(tx, `RELEASE SAVEPOINT ${name}`);
    // Released into the level around it: undone if that level rolls back.
    const levels = undos.get(tx);
    const released = levels?.pop() ?? [];
    levels?.at(-1)?.push(...released);
    return result;
  } catch (err) {
    undoLevel(tx); // its writes are gone whether or not the rollback itself succeeds
    await answered(tx); // a savepoint that never opened: the transaction is broken, and this says why
    await tx.query(`ROLLBACK TO SAVEPOINT ${name}`);
    throw err;
  } finally {
    depth.set(tx, level - 1);
  }
}
