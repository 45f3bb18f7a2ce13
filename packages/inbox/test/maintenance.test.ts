// The inbox's tables over time: migrate() at every start of every replica, and
// prune() keeping the remembered ids to a window while the subjects' sequences
// keep an old replay harmless.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createInbox } from '../src/index.js';
import {
  customerDatabase,
  effects,
  handsetEvent,
  newEndpointSecret,
  quietErrors,
  recordEffect,
  remembered,
  sign,
  type CustomerDatabase,
} from './support.js';

let db: CustomerDatabase;
const secret = newEndpointSecret();

beforeAll(async () => {
  db = await customerDatabase();
});
afterAll(async () => {
  await db.drop();
});

const tables = async (like: string) =>
  (
    await db.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_class WHERE relname LIKE $1 AND relkind IN ('r', 'i')`,
      [like],
    )
  ).rows[0]!.n;

describe('migrate', () => {
  it('5 at once on an empty database, then 5 more: no error, and each table and index exists once', async () => {
    const inbox = () => createInbox({ pool: db.pool, secret });
    await Promise.all(Array.from({ length: 5 }, () => inbox().migrate()));
    await Promise.all(Array.from({ length: 5 }, () => inbox().migrate()));
    // handset_inbox, its primary key, its received_at index; the subjects table and its primary key.
    expect(await tables('handset_inbox%')).toBe(5);
    expect((await inbox().receive(sign(handsetEvent(), secret), recordEffect)).result).toBe('handled');
  });

  it('a schema-qualified table of another name lives beside the default one, with its own subjects', async () => {
    await db.pool.query('CREATE SCHEMA IF NOT EXISTS billing');
    const inbox = () => createInbox({ pool: db.pool, secret, table: 'billing.webhook_inbox', ...quietErrors });
    await Promise.all(Array.from({ length: 5 }, () => inbox().migrate()));
    const event = handsetEvent();
    expect((await inbox().receive(sign(event, secret), recordEffect)).result).toBe('handled');
    expect(await remembered(db.pool, 'billing.webhook_inbox')).toBe(1);
    expect(await remembered(db.pool, 'billing.webhook_inbox_subjects')).toBe(1);
    // The default inbox has not seen it: each inbox dedupes on its own.
    expect((await createInbox({ pool: db.pool, secret }).receive(sign(event, secret), recordEffect)).result).toBe(
      'handled',
    );
    expect(await effects(db.pool, event.id)).toBe(2);
  });
});

describe('prune', () => {
  it('deletes only the ids older than olderThan, in batches, and says how many', async () => {
    const inbox = createInbox({ pool: db.pool, secret });
    await inbox.migrate();
    await db.pool.query('TRUNCATE handset_inbox');
    await db.pool.query(`INSERT INTO handset_inbox (event_id, event_type, received_at)
      SELECT 'evt_old_' || i, 'message.sent', now() - interval '31 days' FROM generate_series(1, 12001) i`);
    await db.pool.query(`INSERT INTO handset_inbox (event_id, event_type, received_at)
      SELECT 'evt_young_' || i, 'message.sent', now() - interval '29 days' FROM generate_series(1, 10) i`);
    expect(await inbox.prune({ olderThan: '30d' })).toBe(12_001);
    expect(await remembered(db.pool)).toBe(10);
    expect(await inbox.prune({ olderThan: '30d' })).toBe(0);
    expect(await inbox.prune({ olderThan: '720h' })).toBe(0);
    expect(await inbox.prune({ olderThan: '28d' })).toBe(10);
  });

  it('a pruned event delivered again is stale under skip-stale (its subject remembers), and handled again without a sequence', async () => {
    const inbox = createInbox({ pool: db.pool, secret, ...quietErrors });
    const sequenced = handsetEvent({ data: { id: 'msg_pruned', sequence: 3 } });
    const unsequenced = handsetEvent({ type: 'webhook_endpoint.test', data: { id: 'ep_pruned' } });
    for (const e of [sequenced, unsequenced])
      expect((await inbox.receive(sign(e, secret), recordEffect)).result).toBe('handled');
    await db.pool.query(`UPDATE handset_inbox SET received_at = now() - interval '31 days' WHERE event_id = ANY($1)`, [
      [sequenced.id, unsequenced.id],
    ]);
    expect(await inbox.prune({ olderThan: '30d' })).toBe(2);
    expect((await inbox.receive(sign(sequenced, secret), recordEffect)).result).toBe('stale');
    // Without a sequence nothing but the id can tell; keep ids longer than any redelivery can come back.
    expect((await inbox.receive(sign(unsequenced, secret), recordEffect)).result).toBe('handled');
    expect(await effects(db.pool, sequenced.id)).toBe(1);
    expect(await effects(db.pool, unsequenced.id)).toBe(2);
  });

  it('a duration it cannot read is refused, naming the forms it can', async () => {
    const inbox = createInbox({ pool: db.pool, secret });
    await expect(inbox.prune({ olderThan: '30 days' })).rejects.toThrow(/'30d'/);
    await expect(inbox.prune({ olderThan: '' })).rejects.toThrow(/olderThan/);
  });
});
