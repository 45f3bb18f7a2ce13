// The test factory's transaction: whatever a test writes in it is gone after,
// whether the test passed or threw, and code under test that opens a transaction
// of its own nests inside it.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withTx } from '../../src/db/tx.js';
import { count, createTestDatabase, type TestDatabase } from '../support/db.js';
import { account, inRolledBackTx, message } from '../support/factory.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db.drop();
});

describe('inRolledBackTx', () => {
  it('rows written in it are gone after a test that passed, and it returns what the test returned', async () => {
    const m = await inRolledBackTx(db.pool, (tx) => message(tx, { status: 'sent' }));
    expect(m.status).toBe('sent');
    expect(await count(db.pool, 'SELECT 1 FROM messages WHERE id = $1', [m.id])).toBe(0);
    expect(await count(db.pool, 'SELECT 1 FROM accounts WHERE id = $1', [m.account_id])).toBe(0);
  });

  it('rows written in it are gone after a test that threw, and the error is the test’s', async () => {
    let id = '';
    const failing = inRolledBackTx(db.pool, async (tx) => {
      id = (await account(tx)).id;
      throw new Error('the test failed');
    });
    await expect(failing).rejects.toThrow('the test failed');
    expect(await count(db.pool, 'SELECT 1 FROM accounts WHERE id = $1', [id])).toBe(0);
  });

  it('a transaction opened inside it is a savepoint: its rollback keeps what came before', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const kept = await account(tx);
      await expect(
        withTx(tx, async (inner) => {
          await account(inner, { name: 'undone' });
          throw new Error('inner failure');
        }),
      ).rejects.toThrow('inner failure');
      expect((await tx.query("SELECT 1 FROM accounts WHERE name = 'undone'")).rowCount).toBe(0);
      expect((await tx.query('SELECT 1 FROM accounts WHERE id = $1', [kept.id])).rowCount).toBe(1);
    }));
});
