// Ordering by data.sequence per subject, and the rules that must hold at every
// isolation level: an older event never overwrites a newer one (skip-stale) or
// is marked stale (deliver-stale); concurrent copies and concurrent events of
// one subject end the same way whichever transaction gets there first.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import { createInbox, type Handler, type InboxOptions } from '../src/index.js';
import {
  customerDatabase,
  effects,
  gate,
  handsetEvent,
  newEndpointSecret,
  quietErrors,
  recordEffect,
  sign,
  someoneWaitsOnALock,
  type CustomerDatabase,
} from './support.js';

let db: CustomerDatabase;
const secret = newEndpointSecret();

beforeAll(async () => {
  db = await customerDatabase();
  await createInbox({ pool: db.pool, secret }).migrate();
});
afterAll(async () => {
  await db.drop();
});

const inboxWith = (options: Partial<InboxOptions> = {}) =>
  createInbox({ pool: db.pool, secret, ...quietErrors, ...options });

const eventOf = (subject: string, sequence: number | undefined, extra: Record<string, unknown> = {}) =>
  handsetEvent({ data: { id: subject, ...(sequence === undefined ? {} : { sequence }), ...extra } });

async function storedSequence(subject: string): Promise<number | null> {
  const { rows } = await db.pool.query<{ sequence: string }>(
    'SELECT sequence FROM handset_inbox_subjects WHERE subject = $1',
    [subject],
  );
  return rows[0] ? Number(rows[0].sequence) : null;
}

async function runs(subject: string): Promise<{ sequence: number; stale: boolean }[]> {
  const { rows } = await db.pool.query<{ sequence: string; stale: boolean }>(
    'SELECT sequence, stale FROM effects WHERE subject = $1 ORDER BY at',
    [subject],
  );
  return rows.map((r) => ({ sequence: Number(r.sequence), stale: r.stale }));
}

describe('ordering', () => {
  it('skip-stale: seq 3 then seq 2 of one subject runs the handler for 3 only; 2 is stale, and again a duplicate', async () => {
    const inbox = inboxWith();
    const three = eventOf('msg_skip', 3);
    const two = eventOf('msg_skip', 2);
    expect((await inbox.receive(sign(three, secret), recordEffect)).result).toBe('handled');
    expect(await inbox.receive(sign(two, secret), recordEffect)).toEqual({
      status: 200,
      result: 'stale',
      eventId: two.id,
    });
    expect((await inbox.receive(sign(two, secret), recordEffect)).result).toBe('duplicate');
    expect(await runs('msg_skip')).toEqual([{ sequence: 3, stale: false }]);
    expect(await storedSequence('msg_skip')).toBe(3);
  });

  it('deliver-stale: the same order runs the handler twice, the second time with event.stale === true', async () => {
    const inbox = inboxWith({ ordering: 'deliver-stale' });
    const three = eventOf('msg_deliver', 3);
    const two = eventOf('msg_deliver', 2);
    const four = eventOf('msg_deliver', 4);
    expect((await inbox.receive(sign(three, secret), recordEffect)).result).toBe('handled');
    expect((await inbox.receive(sign(two, secret), recordEffect)).result).toBe('handled');
    expect((await inbox.receive(sign(two, secret), recordEffect)).result).toBe('duplicate');
    expect((await inbox.receive(sign(four, secret), recordEffect)).result).toBe('handled');
    expect(await runs('msg_deliver')).toEqual([
      { sequence: 3, stale: false },
      { sequence: 2, stale: true },
      { sequence: 4, stale: false },
    ]);
    expect(await storedSequence('msg_deliver')).toBe(4);
  });

  it('an equal sequence under a new event id is stale too (only a strictly higher one advances)', async () => {
    const inbox = inboxWith();
    await inbox.receive(sign(eventOf('msg_equal', 7), secret), recordEffect);
    expect((await inbox.receive(sign(eventOf('msg_equal', 7), secret), recordEffect)).result).toBe('stale');
    expect((await inbox.receive(sign(eventOf('msg_equal', 8), secret), recordEffect)).result).toBe('handled');
  });

  it('an event without data.sequence, or without data.id, is always handled and leaves the subjects untouched', async () => {
    const inbox = inboxWith();
    const subjects = async () =>
      (await db.pool.query<{ n: number }>('SELECT count(*)::int AS n FROM handset_inbox_subjects')).rows[0]!.n;
    const before = await subjects();
    const noSequence = [eventOf('ep_1', undefined), eventOf('ep_1', undefined)];
    const noId = handsetEvent({ data: { sequence: 1 } });
    for (const e of [...noSequence, noId]) {
      expect((await inbox.receive(sign(e, secret), recordEffect)).result).toBe('handled');
    }
    expect(await subjects()).toBe(before);
    expect(await storedSequence('ep_1')).toBeNull();
  });

  it('a sequence beyond 2^31 is compared as a number, not as text', async () => {
    const inbox = inboxWith();
    await inbox.receive(sign(eventOf('msg_big', 9), secret), recordEffect);
    expect((await inbox.receive(sign(eventOf('msg_big', 10), secret), recordEffect)).result).toBe('handled');
    expect((await inbox.receive(sign(eventOf('msg_big', 2 ** 40), secret), recordEffect)).result).toBe('handled');
    expect((await inbox.receive(sign(eventOf('msg_big', 2 ** 40 - 1), secret), recordEffect)).result).toBe('stale');
  });
});

/** The first event's handler holds its transaction open until the second has blocked on it. */
async function race(
  options: Partial<InboxOptions>,
  first: ReturnType<typeof eventOf>,
  second: ReturnType<typeof eventOf>,
  firstFails = false,
) {
  const hold = gate();
  const entered = gate();
  const inbox = inboxWith(options);
  let run = 0;
  const holding: Handler<pg.PoolClient> = async (event, tx) => {
    await recordEffect(event, tx);
    if (run++ === 0) {
      entered.open();
      await hold.promise;
      if (firstFails) throw new Error('the first fails');
    }
  };
  const a = inbox.receive(sign(first, secret), holding);
  await entered.promise;
  const b = inbox.receive(sign(second, secret), holding);
  await someoneWaitsOnALock(db.pool);
  hold.open();
  return Promise.all([a, b]);
}

describe.each([
  ['the database default (read committed)', undefined],
  ['repeatable read', 'repeatable read'],
  ['serializable', 'serializable'],
] as const)('at %s', (_name, isolation) => {
  const options = isolation ? { isolation } : {};
  const tag = (isolation ?? 'default').replace(' ', '_');

  it('20 concurrent copies: one handler run, 1 handled and 19 duplicate, no 5xx', async () => {
    const inbox = inboxWith(options);
    const event = handsetEvent();
    const outcomes = await Promise.all(
      Array.from({ length: 20 }, () => inbox.receive(sign(event, secret), recordEffect)),
    );
    expect(outcomes.map((o) => o.status)).toEqual(Array(20).fill(200));
    expect(outcomes.filter((o) => o.result === 'handled')).toHaveLength(1);
    expect(await effects(db.pool, event.id)).toBe(1);
  });

  it('seq 5 and seq 4 of one subject in flight together end at 5, whichever holds the row first', async () => {
    for (const order of ['5 first', '4 first'] as const) {
      const subject = `msg_race_${tag}_${order[0]}`;
      await inboxWith().receive(sign(eventOf(subject, 1), secret), recordEffect); // the subject exists
      const five = eventOf(subject, 5);
      const four = eventOf(subject, 4);
      const [x, y] = order === '5 first' ? await race(options, five, four) : await race(options, four, five);
      expect([x.status, y.status]).toEqual([200, 200]);
      expect(await storedSequence(subject)).toBe(5);
      const handled = (await runs(subject)).map((r) => r.sequence);
      expect({ order, handled }).toEqual({ order, handled: order === '5 first' ? [1, 5] : [1, 4, 5] });
    }
  });

  it('a new subject’s first two events in flight together: the higher one’s sequence is kept', async () => {
    const subject = `msg_new_${tag}`;
    const [x, y] = await race(options, eventOf(subject, 2), eventOf(subject, 1));
    expect([x.result, y.result]).toEqual(['handled', 'stale']);
    expect(await storedSequence(subject)).toBe(2);
  });

  it('a copy that meets a serialization failure with no retries left answers 500, never 200 without the effect', async () => {
    const event = handsetEvent();
    const [x, y] = await race({ ...options, retries: 0 }, event, event);
    expect(x.result).toBe('handled');
    // READ COMMITTED has no serialization failure: the copy simply sees the committed id.
    expect([y.status, y.result]).toEqual(isolation ? [500, 'handler_failed'] : [200, 'duplicate']);
    expect(await effects(db.pool, event.id)).toBe(1);
  });

  it('when the first copy rolls back, the copy waiting on it runs the handler: one effect', async () => {
    const event = handsetEvent();
    const [x, y] = await race(options, event, event, true);
    expect([x.result, y.result]).toEqual(['handler_failed', 'handled']);
    expect(await effects(db.pool, event.id)).toBe(1);
  });
});
