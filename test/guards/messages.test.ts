// The guards of a message's transitions, each on its own: a transition applies
// once, a second try finds nothing to do, and every status it does not start
// from refuses it and leaves the row as it was. Rows come from the factory, in a
// transaction rolled back after each test.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  MESSAGE_STATUSES,
  messageCancel,
  messageClaimScheduled,
  messageClearForDispatch,
  messageFinalize,
  messageInsertInbound,
  messageMarkChecked,
  messageMarkRejected,
  messageMarkSent,
  messageInsertOutbound,
  messagesInsertOutbound,
  historyRecord,
  type MessageRow,
  type NewOutbound,
} from '../../src/messages/messages.sql.js';
import { MAX_PRIORITY } from '../../src/jobs/enqueue.js';
import { optOutEndById, optOutEndForPair, optOutInsert } from '../../src/optouts/optouts.sql.js';
import type { Tx } from '../../src/db/tx.js';
import { createTestDatabase, type TestDatabase } from '../support/db.js';
import { account, allBut, inRolledBackTx, later, message, racing, reread, T0, unique } from '../support/factory.js';
import { onOneConnection, onStatisticsOfNow, walRecords } from '../support/plan.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db.drop();
});

describe('messageClaimScheduled: scheduled → queued once send_at has come', () => {
  it('a due scheduled message is claimed once; a second claim finds it queued', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const m = await message(tx, { status: 'scheduled', send_at: T0 });
      expect(await messageClaimScheduled(tx, m.id, T0)).toEqual({
        ...m,
        sequence: m.sequence + 1,
        status: 'queued',
        dispatch_rank: 0,
      });
      expect(await messageClaimScheduled(tx, m.id, T0)).toBeNull();
      expect((await reread(tx, 'messages', m)).status).toBe('queued');
    }));

  it('a scheduled message is not claimed before its send_at', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const m = await message(tx, { status: 'scheduled', send_at: later(1) });
      expect(await messageClaimScheduled(tx, m.id, T0)).toBeNull();
      expect(await reread(tx, 'messages', m)).toEqual(m);
    }));

  it('no other status is claimed', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const status of allBut(MESSAGE_STATUSES, 'scheduled')) {
        const m = await message(tx, { status, send_at: T0 });
        expect(await messageClaimScheduled(tx, m.id, T0), status).toBeNull();
        expect(await reread(tx, 'messages', m), status).toEqual(m);
      }
    }));
});

describe("dispatch_rank: a queued message's place in the dispatch line", () => {
  const outbound = (accountId: string, sendAt: Date | null = null): NewOutbound => ({
    accountId,
    tenantId: null,
    from: '+13125550142',
    to: '+15555550100',
    body: 'In line',
    mediaUrls: [],
    encoding: 'GSM-7',
    segments: 1,
    sendAt,
    carrier: 'telnyx',
  });

  it("an account's messages take consecutive places; another account's first takes the current round's", () =>
    inRolledBackTx(db.pool, async (tx) => {
      const [acme, globex] = [await account(tx), await account(tx)];
      const ranks = [];
      for (let i = 0; i < 3; i++) ranks.push((await messageInsertOutbound(tx, outbound(acme.id))).dispatch_rank);
      expect(ranks).toEqual([0, 1, 2]);
      expect((await messageInsertOutbound(tx, outbound(globex.id))).dispatch_rank).toBe(0);
    }));

  it('many messages inserted in one statement take the places they would one after another; scheduled ones none', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const [acme, globex] = [await account(tx), await account(tx)];
      await messageInsertOutbound(tx, outbound(globex.id));
      await messageInsertOutbound(tx, outbound(acme.id));
      const { accountId: _, ...one } = outbound(acme.id);
      const many = await messagesInsertOutbound(tx, acme.id, [one, { ...one, sendAt: later(60) }, one, one]);
      expect(many.map((m) => [m.status, m.dispatch_rank])).toEqual([
        ['queued', 1],
        ['scheduled', null],
        ['queued', 2],
        ['queued', 3],
      ]);
      const { rows } = await tx.query('SELECT id FROM messages WHERE account_id = $1 AND id = ANY($2)', [
        acme.id,
        many.map((m) => m.id),
      ]);
      expect(rows).toHaveLength(4);
      expect((await messageInsertOutbound(tx, outbound(acme.id))).dispatch_rank).toBe(4);
    }));

  it('a message leaves the line when it is sent or refused; the next joins after the last still waiting', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const acme = await account(tx);
      const [a, b, c] = [
        await messageInsertOutbound(tx, outbound(acme.id)),
        await messageInsertOutbound(tx, outbound(acme.id)),
        await messageInsertOutbound(tx, outbound(acme.id)),
      ];
      expect((await messageMarkSent(tx, c.id, unique('carrier'), null, T0))?.dispatch_rank).toBeNull();
      expect((await messageMarkRejected(tx, a.id, '40310', T0))?.dispatch_rank).toBeNull();
      expect((await messageInsertOutbound(tx, outbound(acme.id))).dispatch_rank).toBe(b.dispatch_rank! + 1);
      // A refused message never reached the carrier (dispatched_at unset): were it still in
      // the line, the round would stay at its place, behind everyone.
      const globex = await account(tx);
      expect((await messageInsertOutbound(tx, outbound(globex.id))).dispatch_rank).toBe(b.dispatch_rank);
      expect((await messageMarkSent(tx, b.id, unique('carrier'), null, T0))?.dispatch_rank).toBeNull();
    }));

  it("a scheduled message has no place until it falls due and is claimed, then joins behind its account's line", () =>
    inRolledBackTx(db.pool, async (tx) => {
      const acme = await account(tx);
      const scheduled = await messageInsertOutbound(tx, outbound(acme.id, later(60)));
      expect(scheduled.dispatch_rank).toBeNull();
      await messageInsertOutbound(tx, outbound(acme.id));
      await messageInsertOutbound(tx, outbound(acme.id));
      expect((await messageClaimScheduled(tx, scheduled.id, later(60)))?.dispatch_rank).toBe(2);
    }));

  it('a message handed to the carrier leaves the line: one still awaiting its answer does not keep its account back', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const [acme, globex] = [await account(tx), await account(tx)];
      const stuck = await messageInsertOutbound(tx, outbound(acme.id));
      await messageClearForDispatch(tx, stuck.id); // handed over; its answer lost, retried for hours
      for (let i = 0; i < 3; i++) await messageInsertOutbound(tx, outbound(globex.id));
      expect((await messageInsertOutbound(tx, outbound(acme.id))).dispatch_rank).toBe(0);
    }));

  it('a line started later takes the current round, not places ahead of a line already waiting', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const [acme, globex] = [await account(tx), await account(tx)];
      const campaign = [];
      for (let i = 0; i < 8; i++) campaign.push(await messageInsertOutbound(tx, outbound(acme.id)));
      // Half of it handed to the carrier: the rest wait at places 4 to 7.
      for (const m of campaign.slice(0, 4)) await messageClearForDispatch(tx, m.id);
      const later = [];
      for (let i = 0; i < 3; i++) later.push((await messageInsertOutbound(tx, outbound(globex.id))).dispatch_rank);
      expect(later).toEqual([4, 5, 6]);
    }));

  // Statistics taken while the account had nothing queued (before its campaign), a
  // connection that prepared the insert then, and 2,000 of its messages queued since.
  it('a message joining a backlog of 2,000 reads one entry of it', async () => {
    const acme = await account(db.pool as unknown as Tx);
    const read = await onStatisticsOfNow(db.pool, 'messages', () =>
      onOneConnection(db.pool, async (client, watch) => {
        const tx = client as unknown as Tx;
        for (let i = 0; i < 5; i++) await messageInsertOutbound(tx, outbound(acme.id));
        await db.pool.query(
          `INSERT INTO messages (account_id, direction, from_number, to_number, body, status, encoding, segments,
                                 dispatch_rank)
           SELECT $1, 'outbound', '+13125550142', '+15555550100', 'In line', 'queued', 'GSM-7', 1, 4 + i
             FROM generate_series(1, 2000) i`,
          [acme.id],
        );
        let rank: number | null = null;
        const n = await watch('messages', async () => {
          rank = (await messageInsertOutbound(tx, outbound(acme.id))).dispatch_rank;
        });
        expect(rank).toBe(2005);
        return n;
      }),
    ).finally(() => db.pool.query(`DELETE FROM messages WHERE account_id = $1`, [acme.id]));
    expect(read).toBeGreaterThan(0);
    expect(read).toBeLessThan(10);
  });

  it('a backlog deeper than the largest job priority keeps its order among equals at the end of the line', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const acme = await account(tx);
      await message(tx, { account_id: acme.id, status: 'queued', dispatch_rank: MAX_PRIORITY });
      expect((await messageInsertOutbound(tx, outbound(acme.id))).dispatch_rank).toBe(MAX_PRIORITY);
    }));
});

describe('messageMarkSent: queued → sent with the carrier id, the transition that bills', () => {
  it('a queued message is marked sent once; a second send answer finds it sent', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const m = await message(tx, { status: 'queued' });
      const sent = await messageMarkSent(tx, m.id, 'carrier-1', null, T0);
      expect(sent).toEqual({
        ...m,
        sequence: m.sequence + 1,
        status: 'sent',
        carrier_message_id: 'carrier-1',
        sent_at: T0,
      });
      expect(await messageMarkSent(tx, m.id, 'carrier-2', null, later(1))).toBeNull();
      expect(await reread(tx, 'messages', m)).toEqual(sent);
    }));

  it('a message already past sending, canceled or inbound is not marked sent', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const status of allBut(MESSAGE_STATUSES, 'queued', 'scheduled')) {
        const m = await message(tx, { status });
        expect(await messageMarkSent(tx, m.id, unique('carrier'), null, T0), status).toBeNull();
        expect(await reread(tx, 'messages', m), status).toEqual(m);
      }
    }));

  // Only a claimed (queued) message is sent: the claim is what makes a later cancel refuse.
  it('a scheduled message is not marked sent before it is claimed', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const m = await message(tx, { status: 'scheduled', send_at: T0 });
      expect(await messageMarkSent(tx, m.id, unique('carrier'), null, T0)).toBeNull();
      expect(await reread(tx, 'messages', m)).toEqual(m);
    }));
});

describe('messageMarkRejected: queued → failed when the carrier refuses the send', () => {
  it('a queued message is rejected once; a second refusal finds it failed', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const m = await message(tx, { status: 'queued' });
      const failed = await messageMarkRejected(tx, m.id, '40310', T0);
      expect(failed).toEqual({
        ...m,
        sequence: m.sequence + 1,
        status: 'failed',
        error_code: '40310',
        completed_at: T0,
      });
      expect(await messageMarkRejected(tx, m.id, '40311', later(1))).toBeNull();
      expect(await reread(tx, 'messages', m)).toEqual(failed);
    }));

  it('a message already sent, finished, canceled or inbound is not rejected', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const status of allBut(MESSAGE_STATUSES, 'queued', 'scheduled')) {
        const m = await message(tx, { status });
        expect(await messageMarkRejected(tx, m.id, '40310', T0), status).toBeNull();
        expect(await reread(tx, 'messages', m), status).toEqual(m);
      }
    }));

  // A send refusal fails only a claimed message, never one still cancelable.
  it('a scheduled message is not rejected before it is claimed', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const m = await message(tx, { status: 'scheduled', send_at: T0 });
      expect(await messageMarkRejected(tx, m.id, '40310', T0)).toBeNull();
      expect(await reread(tx, 'messages', m)).toEqual(m);
    }));
});

describe('messageCancel: scheduled → canceled, by the account that owns it', () => {
  it('a scheduled message is canceled once; a second cancel finds it canceled', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const m = await message(tx, { status: 'scheduled' });
      const canceled = await messageCancel(tx, m.account_id, m.id, T0);
      expect(canceled).toEqual({ ...m, sequence: m.sequence + 1, status: 'canceled', completed_at: T0 });
      expect(await messageCancel(tx, m.account_id, m.id, later(1))).toBeNull();
      expect(await reread(tx, 'messages', m)).toEqual(canceled);
    }));

  it('another account cannot cancel it', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const m = await message(tx, { status: 'scheduled' });
      const other = await message(tx, { status: 'scheduled' });
      expect(await messageCancel(tx, other.account_id, m.id, T0)).toBeNull();
      expect(await reread(tx, 'messages', m)).toEqual(m);
    }));

  it('a message no longer scheduled is not canceled', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const status of allBut(MESSAGE_STATUSES, 'scheduled')) {
        const m = await message(tx, { status });
        expect(await messageCancel(tx, m.account_id, m.id, T0), status).toBeNull();
        expect(await reread(tx, 'messages', m), status).toEqual(m);
      }
    }));
});

describe('messageFinalize: sent → delivered | failed, the first terminal word wins', () => {
  it('a sent message is finalized once; a second receipt finds nothing to do', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const m = await message(tx, { status: 'sent' });
      const delivered = await messageFinalize(tx, 'telnyx', m.carrier_message_id!, 'delivered', null, later(5));
      expect(delivered).toEqual({ ...m, sequence: m.sequence + 1, status: 'delivered', completed_at: later(5) });
      expect(await messageFinalize(tx, 'telnyx', m.carrier_message_id!, 'failed', '40300', later(6))).toBeNull();
      expect(await messageFinalize(tx, 'telnyx', m.carrier_message_id!, 'delivered', null, later(7))).toBeNull();
      expect(await reread(tx, 'messages', m)).toEqual(delivered);
    }));

  it('a finalized or inbound message refuses a receipt', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const status of ['delivered', 'failed', 'received'] as const) {
        const m = await message(tx, { status });
        expect(
          await messageFinalize(tx, 'telnyx', m.carrier_message_id!, 'delivered', null, later(9)),
          status,
        ).toBeNull();
        expect(await reread(tx, 'messages', m), status).toEqual(m);
      }
    }));

  // Only a sent message takes a receipt: a canceled one (terminal already) or one
  // never sent would otherwise reach a second terminal status.
  it('a message that was never sent refuses a receipt', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const status of allBut(MESSAGE_STATUSES, 'sent', 'delivered', 'failed', 'received')) {
        const m = await message(tx, { status, carrier_message_id: `never-sent-${status}` });
        expect(
          await messageFinalize(tx, 'telnyx', m.carrier_message_id!, 'delivered', null, later(9)),
          status,
        ).toBeNull();
        expect(await reread(tx, 'messages', m), status).toEqual(m);
      }
    }));
});

describe('messageFinalize between transactions: it judges the row as it is once locked', () => {
  it('two receipts racing: the one that waited for the other’s commit finds the message finalized and changes nothing', async () => {
    const m = await message(db.pool as unknown as Tx, { status: 'sent' });
    const [delivered, failed] = await racing(
      db.pool,
      (tx) => messageFinalize(tx, 'telnyx', m.carrier_message_id!, 'delivered', null, later(5)),
      (tx) => messageFinalize(tx, 'telnyx', m.carrier_message_id!, 'failed', '30003', later(6)),
    );
    expect(delivered?.status).toBe('delivered');
    expect(failed).toBeNull();
    expect(await reread(db.pool as unknown as Tx, 'messages', m)).toEqual(delivered);
  });

  it('a receipt being applied does not hold up history another transaction writes about the same message', async () => {
    const m = await message(db.pool as unknown as Tx, { status: 'sent' });
    await inRolledBackTx(db.pool, async (tx) => {
      expect(await messageFinalize(tx, 'telnyx', m.carrier_message_id!, 'delivered', null, later(5))).not.toBeNull();
      // Its row lock is the one an UPDATE takes: a foreign-key check (FOR KEY SHARE) passes it.
      await inRolledBackTx(db.pool, async (other) => {
        await other.query(`SET LOCAL lock_timeout = '2s'`);
        await historyRecord(other, {
          messageId: m.id,
          source: 'carrier',
          status: 'sent',
          effect: 'informational',
          occurredAt: later(4),
        });
      });
    });
  });
});

describe('a receipt or a reconciliation reads its own message, not the messages in flight', () => {
  // A database of its own: the statistics are those of this rule's rows alone. In the
  // file's database the sent messages the tests before it leave (committed, outside
  // any rolled-back transaction) make the partial index of sent messages look full,
  // and the planner avoids it whatever the statement says.
  let own: TestDatabase;
  beforeAll(async () => {
    own = await createTestDatabase();
  });
  afterAll(async () => {
    await own.drop();
  });

  /** `n` outbound messages of one account, sent and awaiting their receipts. */
  const sentMessages = async (n: number, tag: string): Promise<{ id: string; carrier_message_id: string }[]> => {
    const { id } = await account(own.pool as unknown as Tx);
    const { rows } = await own.pool.query<{ id: string; carrier_message_id: string }>(
      `INSERT INTO messages (account_id, direction, from_number, to_number, body, status, encoding, segments,
                             carrier_message_id, sent_at)
       SELECT $1, 'outbound', '+13125550142', '+15555550100', 'in flight', 'sent', 'GSM-7', 1,
              $2 || '-' || i || '-' || gen_random_uuid(), now()
         FROM generate_series(1, $3) i
       RETURNING id, carrier_message_id`,
      [id, tag, n],
    );
    return rows;
  };

  // The connection prepares its statements while few messages are sent at once, on
  // statistics taken when none was (a campaign's creates), then the campaign puts
  // thousands in flight.
  it.each([
    [
      'a delivered receipt (messageFinalize)',
      (db: Tx, m: { carrier_message_id: string }) =>
        messageFinalize(db, 'telnyx', m.carrier_message_id, 'delivered', null, later(5)),
    ],
    ['a reconciliation (messageMarkChecked)', (db: Tx, m: { id: string }) => messageMarkChecked(db, m.id, later(5))],
  ])('%s with 2,000 messages in flight reads its own message', async (_, apply) => {
    await sentMessages(20, 'young');
    await own.pool.query(`UPDATE messages SET status = 'delivered' WHERE body = 'in flight'`);
    const read = await onStatisticsOfNow(own.pool, 'messages', () =>
      onOneConnection(own.pool, async (client, watch) => {
        for (const m of await sentMessages(10, 'early')) await apply(client as unknown as Tx, m);
        const [last] = await sentMessages(2_000, 'campaign');
        return watch('messages', () => apply(client as unknown as Tx, last!));
      }),
    ).finally(() => own.pool.query(`DELETE FROM messages WHERE body = 'in flight'`));
    expect(read).toBeGreaterThan(0);
    expect(read).toBeLessThan(10);
  });
});

describe('a receipt or a reconciliation writes its message once', () => {
  // Locking the row in a step of its own before changing it writes a WAL record
  // for the lock, on the path every receipt takes. Measured against the bare
  // UPDATE of a twin message, so index entries and page images count alike.
  it.each([
    [
      'a delivered receipt (messageFinalize)',
      (db: Tx, m: MessageRow) => messageFinalize(db, 'telnyx', m.carrier_message_id!, 'delivered', null, later(5)),
      `UPDATE messages SET status = 'delivered', error_code = NULL, completed_at = $2, sequence = sequence + 1
        WHERE id = $1`,
    ],
    [
      'a reconciliation (messageMarkChecked)',
      (db: Tx, m: MessageRow) => messageMarkChecked(db, m.id, later(5)),
      'UPDATE messages SET checked_at = $2 WHERE id = $1',
    ],
  ])('%s writes no more WAL than the bare UPDATE of its change', async (_, apply, bare) => {
    const pool = db.pool as unknown as Tx;
    const [twin, m] = [await message(pool, { status: 'sent' }), await message(pool, { status: 'sent' })];
    const baseline = await walRecords(db.pool, (p) => p.query({ text: bare, values: [twin.id, later(5)] }));
    const written = await walRecords(db.pool, (p) => apply(p as unknown as Tx, m));
    expect(await reread(pool, 'messages', m)).not.toEqual(m);
    expect(baseline).toBeGreaterThan(0);
    expect(written).toBeLessThanOrEqual(baseline);
  });
});

describe('messageInsertInbound: one message per carrier message id', () => {
  const inbound = (accountId: string, carrierMessageId: string, carrier = 'telnyx') => ({
    accountId,
    tenantId: null,
    from: '+15555550100',
    to: '+13125550142',
    body: 'hi',
    mediaUrls: [],
    encoding: 'GSM-7' as const,
    segments: 1,
    carrier,
    carrierMessageId,
    receivedAt: T0,
  });

  it('an inbound SMS is inserted once; the same carrier id again inserts nothing', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const { account_id } = await message(tx);
      const first = await messageInsertInbound(tx, inbound(account_id, 'sms-1'));
      expect(first).toMatchObject({ status: 'received', direction: 'inbound', carrier_message_id: 'sms-1' });
      expect(await messageInsertInbound(tx, { ...inbound(account_id, 'sms-1'), body: 'again' })).toBeNull();
      expect(await reread(tx, 'messages', first!)).toEqual(first);
    }));

  it('a carrier id some message in any status already has inserts nothing', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const status of MESSAGE_STATUSES) {
        const m = await message(tx, { status, carrier_message_id: unique('taken') });
        expect(await messageInsertInbound(tx, inbound(m.account_id, m.carrier_message_id!)), status).toBeNull();
        expect(await reread(tx, 'messages', m), status).toEqual(m);
      }
    }));

  it('the same id at another carrier is another message', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const m = await message(tx, { status: 'received' });
      const other = await messageInsertInbound(tx, inbound(m.account_id, m.carrier_message_id!, 'othercarrier'));
      expect(other).toMatchObject({ carrier: 'othercarrier', carrier_message_id: m.carrier_message_id });
    }));
});

describe('messageMarkChecked: reconciliation bookkeeping on a sent message only', () => {
  it('a sent message records when the carrier was asked', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const m = await message(tx, { status: 'sent' });
      await messageMarkChecked(tx, m.id, later(60));
      expect(await reread(tx, 'messages', m)).toEqual({ ...m, checked_at: later(60) });
    }));

  it('a message in any other status is left as it was', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const status of allBut(MESSAGE_STATUSES, 'sent')) {
        const m = await message(tx, { status });
        await messageMarkChecked(tx, m.id, later(60));
        expect(await reread(tx, 'messages', m), status).toEqual(m);
      }
    }));
});

describe('messageClearForDispatch: a queued message is cleared to go to the carrier unless its recipient opted out', () => {
  const pair = (m: { account_id: string; from_number: string; to_number: string }) => ({
    accountId: m.account_id,
    number: m.from_number,
    recipient: m.to_number,
  });

  it('a queued message to a recipient who did not opt out is stamped once, and keeps its first stamp', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const m = await message(tx, { status: 'queued' });
      const first = await messageClearForDispatch(tx, m.id);
      expect(first?.dispatched_at).toBeInstanceOf(Date);
      expect({ ...first, dispatched_at: null }).toEqual(m);
      expect((await messageClearForDispatch(tx, m.id))?.dispatched_at).toEqual(first?.dispatched_at);
    }));

  it('a queued message to an opted-out recipient is not cleared, and the row is left as it was', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const m = await message(tx, { status: 'queued' });
      await optOutInsert(tx, { ...pair(m), tenantId: null, source: 'keyword' });
      expect(await messageClearForDispatch(tx, m.id)).toBeNull();
      expect(await reread(tx, 'messages', m)).toEqual(m);
    }));

  it('an opt-out of another pair, or one that ended, does not stop it', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const m = await message(tx, { status: 'queued' });
      await optOutInsert(tx, { ...pair(m), number: '+13125550199', tenantId: null, source: 'api' });
      await optOutInsert(tx, { ...pair(m), tenantId: null, source: 'api' });
      await optOutEndForPair(tx, pair(m));
      expect(await messageClearForDispatch(tx, m.id)).not.toBeNull();
    }));

  it('a retry of a send already cleared is not checked again (the first attempt may have reached the carrier)', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const m = await message(tx, { status: 'queued' });
      const first = await messageClearForDispatch(tx, m.id);
      await optOutInsert(tx, { ...pair(m), tenantId: null, source: 'keyword' });
      expect(await messageClearForDispatch(tx, m.id)).toEqual(first);
    }));

  it('no other status is cleared', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const status of allBut(MESSAGE_STATUSES, 'queued')) {
        const m = await message(tx, { status });
        expect(await messageClearForDispatch(tx, m.id), status).toBeNull();
        expect(await reread(tx, 'messages', m), status).toEqual(m);
      }
    }));
});

describe('opt-outs: one active entry per pair, ended once', () => {
  it('a second opt-out of the same pair inserts nothing; after it ends, the pair can opt out again', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const m = await message(tx, { status: 'queued' });
      const p = { accountId: m.account_id, number: m.from_number, recipient: m.to_number };
      const first = await optOutInsert(tx, { ...p, tenantId: null, source: 'keyword' });
      expect(first).toMatchObject({ ...{ number: p.number, recipient: p.recipient }, sequence: 1, deleted_at: null });
      expect(await optOutInsert(tx, { ...p, tenantId: null, source: 'carrier' })).toBeNull();
      const ended = await optOutEndForPair(tx, p);
      expect(ended).toMatchObject({ id: first!.id, sequence: 2 });
      expect(ended!.deleted_at!.getTime()).toBeGreaterThanOrEqual(first!.created_at.getTime());
      expect(await optOutEndForPair(tx, p)).toBeNull();
      expect(await optOutEndById(tx, p.accountId, first!.id)).toBeNull();
      const again = await optOutInsert(tx, { ...p, tenantId: null, source: 'api' });
      expect(again?.id).not.toBe(first!.id);
    }));

  it("an account cannot end another account's opt-out", () =>
    inRolledBackTx(db.pool, async (tx) => {
      const m = await message(tx, { status: 'queued' });
      const other = await message(tx, { status: 'queued' });
      const o = await optOutInsert(tx, {
        accountId: m.account_id,
        number: m.from_number,
        recipient: m.to_number,
        tenantId: null,
        source: 'api',
      });
      expect(await optOutEndById(tx, other.account_id, o!.id)).toBeNull();
      expect(await optOutEndById(tx, m.account_id, o!.id)).not.toBeNull();
    }));
});
