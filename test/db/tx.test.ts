// onRollback keeps state held in memory beside a transaction true to it: what a
// rolled-back savepoint (or transaction) wrote is undone in memory too, and what
// a released savepoint wrote stays until the level around it rolls back.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { onRollback, withTx } from '../../src/db/tx.js';
import { createTestDatabase, type TestDatabase } from '../support/db.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
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
