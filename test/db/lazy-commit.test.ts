// Lazily committing connections (the delivery runner's): bookkeeping commits
// return before their WAL is flushed, but a transaction that creates a customer
// event commits durably, since that event may be delivered before a crash could
// take it back.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { commitDurably, createPool } from '../../src/db/pool.js';
import { withTx } from '../../src/db/tx.js';
import { emit } from '../../src/outbox/outbox.js';
import { createTestDatabase, type TestDatabase } from '../support/db.js';
import { account } from '../support/factory.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db.drop();
});

const setting = async (tx: { query: (q: string) => Promise<{ rows: { synchronous_commit: string }[] }> }) =>
  (await tx.query('SHOW synchronous_commit')).rows[0]!.synchronous_commit;

describe('lazy commits', () => {
  it('a lazy connection commits lazily, except a transaction that emits a customer event, which commits durably', async () => {
    const pool = createPool(db.url, { max: 1, applicationName: 'lazy-test', lazyCommit: true });
    try {
      await withTx(pool, async (tx) => {
        expect(await setting(tx)).toBe('off');
        const a = await account(tx);
        await emit(tx, {
          accountId: a.id,
          tenantId: null,
          type: 'message.delivered',
          subjectId: 'msg_lazy',
          data: { id: 'msg_lazy' },
          occurredAt: new Date(),
        });
        expect(await setting(tx)).toBe('on');
      });
      // The durable commit was the emitting transaction's alone: the connection is lazy again.
      await withTx(pool, async (tx) => expect(await setting(tx)).toBe('off'));
    } finally {
      await pool.end();
    }
  });

  it('on an ordinary connection commits are as the server says, and commitDurably asks nothing of it', async () => {
    const pool = createPool(db.url, { max: 1, applicationName: 'durable-test' });
    let statements = 0;
    try {
      await withTx(pool, async (tx) => {
        const before = await setting(tx);
        const query = tx.query.bind(tx);
        tx.query = ((...args: Parameters<typeof query>) => {
          statements++;
          return query(...args);
        }) as typeof tx.query;
        await commitDurably(tx);
        tx.query = query;
        expect(await setting(tx)).toBe(before);
      });
      expect(statements).toBe(0);
    } finally {
      await pool.end();
    }
  });
});
