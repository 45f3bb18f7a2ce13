// The guards of a call's and a leg's transitions, each on its own: a transition
// applies once, a second try (a duplicate webhook) finds nothing to do, and every
// status it does not start from refuses it and leaves the row as it was. Rows
// come from the factory, in a transaction rolled back after each test.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CALL_STATUSES,
  callAnswer,
  callClaimNext,
  callEnd,
  callInsert,
  callMarkCallerChecked,
  LEG_STATUSES,
  legAbandon,
  legAnswer,
  legEnd,
  legEndingFind,
  legEndingRecord,
  legMarkChecked,
  legStamp,
} from '../../src/calls/calls.sql.js';
import { createTestDatabase, type TestDatabase } from '../support/db.js';
import { allBut, call, inRolledBackTx, later, leg, reread, T0, unique } from '../support/factory.js';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  await db.drop();
});

describe('callInsert: an inbound call is one per caller leg at its carrier', () => {
  const inbound = (accountId: string, callerRef: string, carrier = 'telnyx') => ({
    accountId,
    tenantId: null,
    direction: 'inbound' as const,
    from: '+15555550100',
    number: '+13125550142',
    plan: { targets: ['+15555550110'], timeout: 20, next: 0 },
    carrier,
    callerRef,
  });

  it('an inbound call is inserted once; a re-sent call.initiated finds the caller taken', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const { account_id } = await call(tx);
      const first = await callInsert(tx, inbound(account_id, 'caller-1'));
      expect(first).toMatchObject({ status: 'ringing', direction: 'inbound', caller_ref: 'caller-1' });
      expect(await callInsert(tx, inbound(account_id, 'caller-1'))).toBeNull();
      expect(await reread(tx, 'calls', first!)).toEqual(first);
    }));

  it('a caller ref a call in any status already has inserts nothing', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const status of CALL_STATUSES) {
        const c = await call(tx, { status, direction: 'inbound' });
        expect(await callInsert(tx, inbound(c.account_id, c.caller_ref!)), status).toBeNull();
        expect(await reread(tx, 'calls', c), status).toEqual(c);
      }
    }));

  it('the same caller ref at another carrier is another call', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const c = await call(tx, { direction: 'inbound' });
      expect(await callInsert(tx, inbound(c.account_id, c.caller_ref!, 'othercarrier'))).toMatchObject({
        carrier: 'othercarrier',
        caller_ref: c.caller_ref,
      });
    }));
});

describe('callClaimNext: the ring cursor moves by compare-and-swap while the call rings', () => {
  it('the next target is claimed once; a duplicate hangup finds the cursor moved on', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const c = await call(tx, { status: 'ringing' });
      const claimed = await callClaimNext(tx, c.id, 1);
      expect(claimed).toEqual({ ...c, sequence: c.sequence + 1, ring_plan: { ...c.ring_plan, next: 2 } });
      expect(await callClaimNext(tx, c.id, 1)).toBeNull();
      expect(await reread(tx, 'calls', c)).toEqual(claimed);
    }));

  it('a call no longer ringing moves no cursor', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const status of allBut(CALL_STATUSES, 'ringing')) {
        const c = await call(tx, { status });
        expect(await callClaimNext(tx, c.id, 1), status).toBeNull();
        expect(await reread(tx, 'calls', c), status).toEqual(c);
      }
    }));
});

describe('callAnswer: ringing → in_progress, the first answer wins', () => {
  it('a ringing call is answered once; a second answer finds it in progress', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const c = await call(tx, { status: 'ringing' });
      const answered = await callAnswer(tx, c.id, 'leg-1', later(3));
      expect(answered).toEqual({
        ...c,
        sequence: c.sequence + 1,
        status: 'in_progress',
        answered_leg_id: 'leg-1',
        answered_at: later(3),
      });
      expect(await callAnswer(tx, c.id, 'leg-2', later(4))).toBeNull();
      expect(await reread(tx, 'calls', c)).toEqual(answered);
    }));

  it('a call not ringing is not answered', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const status of allBut(CALL_STATUSES, 'ringing')) {
        const c = await call(tx, { status });
        expect(await callAnswer(tx, c.id, 'leg-1', later(3)), status).toBeNull();
        expect(await reread(tx, 'calls', c), status).toEqual(c);
      }
    }));
});

describe('callEnd: ringing → missed, in_progress → completed, once', () => {
  it('a ringing call ends missed once; a second hangup finds it ended', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const c = await call(tx, { status: 'ringing' });
      const ended = await callEnd(tx, c.id, later(20));
      expect(ended).toEqual({
        ...c,
        sequence: c.sequence + 1,
        status: 'missed',
        ended_at: later(20),
        duration_seconds: 0,
      });
      expect(await callEnd(tx, c.id, later(21))).toBeNull();
      expect(await reread(tx, 'calls', c)).toEqual(ended);
    }));

  it('an answered call ends completed with its duration once; a second hangup bills nothing more', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const c = await call(tx, { status: 'in_progress', answered_at: T0 });
      const ended = await callEnd(tx, c.id, later(61.2));
      expect(ended).toEqual({
        ...c,
        sequence: c.sequence + 1,
        status: 'completed',
        ended_at: later(61.2),
        duration_seconds: 62,
      });
      expect(await callEnd(tx, c.id, later(90))).toBeNull();
      expect(await reread(tx, 'calls', c)).toEqual(ended);
    }));

  it('an ended call is not ended again', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const status of allBut(CALL_STATUSES, 'ringing', 'in_progress')) {
        const c = await call(tx, { status });
        expect(await callEnd(tx, c.id, later(300)), status).toBeNull();
        expect(await reread(tx, 'calls', c), status).toEqual(c);
      }
    }));

  it('a stale leg cannot end a call whose cursor has moved on, nor one that was answered', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const ringing = await call(tx, { status: 'ringing' });
      expect(await callEnd(tx, ringing.id, later(20), { ringCursor: 2 })).toBeNull();
      expect(await reread(tx, 'calls', ringing)).toEqual(ringing);
      const answered = await call(tx, { status: 'in_progress' });
      expect(await callEnd(tx, answered.id, later(20), { ringCursor: 1 })).toBeNull();
      expect(await reread(tx, 'calls', answered)).toEqual(answered);
      expect(await callEnd(tx, ringing.id, later(20), { ringCursor: 1 })).toMatchObject({ status: 'missed' });
    }));
});

describe('legStamp: the carrier reference is recorded once, dialing → ringing', () => {
  it('a dialing leg is stamped once; the second of the dial answer and call.initiated finds it stamped', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const l = await leg(tx, { status: 'dialing' });
      const stamped = await legStamp(tx, l.id, 'ref-1', T0);
      expect(stamped).toEqual({ ...l, status: 'ringing', carrier_ref: 'ref-1', dialed_at: T0 });
      expect(await legStamp(tx, l.id, 'ref-2', later(1))).toBeNull();
      expect(await reread(tx, 'call_legs', l)).toEqual(stamped);
    }));

  it('a leg that has a carrier reference, in any status, keeps it', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const status of LEG_STATUSES) {
        const l = await leg(tx, { status, carrier_ref: unique('ref') });
        expect(await legStamp(tx, l.id, unique('ref'), later(1)), status).toBeNull();
        expect(await reread(tx, 'call_legs', l), status).toEqual(l);
      }
    }));

  it('a stamp moves only a dialing leg to ringing; an abandoned leg keeps its status', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const status of ['canceled', 'failed'] as const) {
        const l = await leg(tx, { status });
        expect(await legStamp(tx, l.id, unique('ref'), T0), status).toMatchObject({ status });
      }
    }));
});

describe('legAbandon: dialing → canceled | failed when the dial never went out', () => {
  it('a dialing leg is abandoned once; a second abandon finds it ended', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const l = await leg(tx, { status: 'dialing' });
      const canceled = await legAbandon(tx, l.id, 'canceled', 'call_over', T0);
      expect(canceled).toEqual({ ...l, status: 'canceled', hangup_cause: 'call_over', ended_at: T0 });
      expect(await legAbandon(tx, l.id, 'failed', 'dial_refused', later(1))).toBeNull();
      expect(await reread(tx, 'call_legs', l)).toEqual(canceled);
    }));

  it('a leg past dialing is not abandoned', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const status of allBut(LEG_STATUSES, 'dialing')) {
        const l = await leg(tx, { status });
        expect(await legAbandon(tx, l.id, 'failed', 'dial_refused', later(100)), status).toBeNull();
        expect(await reread(tx, 'call_legs', l), status).toEqual(l);
      }
    }));
});

describe('legAnswer: dialing | ringing → answered, while the leg is up', () => {
  it('a ringing leg is answered once; a duplicate answer finds it answered', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const l = await leg(tx, { status: 'ringing' });
      const answered = await legAnswer(tx, l.id, later(3));
      expect(answered).toEqual({ ...l, status: 'answered', answered_at: later(3) });
      expect(await legAnswer(tx, l.id, later(4), true)).toBeNull();
      expect(await reread(tx, 'call_legs', l)).toEqual(answered);
    }));

  it('an answer that outran the stamp still answers a dialing leg, and a lookup says so', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const l = await leg(tx, { status: 'dialing' });
      expect(await legAnswer(tx, l.id, later(3), true)).toEqual({
        ...l,
        status: 'answered',
        answered_at: later(3),
        reconciled: ['answered'],
      });
    }));

  it('a leg answered or ended is not answered', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const status of allBut(LEG_STATUSES, 'dialing', 'ringing')) {
        const l = await leg(tx, { status });
        expect(await legAnswer(tx, l.id, later(100)), status).toBeNull();
        expect(await reread(tx, 'call_legs', l), status).toEqual(l);
      }
    }));
});

describe('legEnd: a leg hangs up once, completed if it was answered, else no_answer', () => {
  it('an answered leg ends completed once; a second hangup finds it ended', () =>
    inRolledBackTx(db.pool, async (tx) => {
      const l = await leg(tx, { status: 'answered' });
      const ended = await legEnd(tx, l.id, 'normal_clearing', later(65));
      expect(ended).toEqual({ ...l, status: 'completed', hangup_cause: 'normal_clearing', ended_at: later(65) });
      expect(await legEnd(tx, l.id, 'normal_clearing', later(66), true)).toBeNull();
      expect(await reread(tx, 'call_legs', l)).toEqual(ended);
    }));

  it('an unanswered leg ends no_answer', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const status of ['dialing', 'ringing'] as const) {
        const l = await leg(tx, { status });
        expect(await legEnd(tx, l.id, 'timeout', later(20)), status).toEqual({
          ...l,
          status: 'no_answer',
          hangup_cause: 'timeout',
          ended_at: later(20),
        });
      }
    }));

  it('an ended leg is not ended again', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const status of allBut(LEG_STATUSES, 'dialing', 'ringing', 'answered')) {
        const l = await leg(tx, { status });
        expect(await legEnd(tx, l.id, 'normal_clearing', later(300)), status).toBeNull();
        expect(await reread(tx, 'call_legs', l), status).toEqual(l);
      }
    }));
});

describe('legEndingRecord: the first ending of a carrier leg no call names yet is kept', () => {
  it('an ending is recorded once; a second ending of that leg changes nothing', () =>
    inRolledBackTx(db.pool, async (tx) => {
      expect(await legEndingRecord(tx, 'telnyx', 'early-caller', T0, 'normal_clearing')).toBe(true);
      expect(await legEndingRecord(tx, 'telnyx', 'early-caller', later(1), 'timeout')).toBe(false);
      expect(await legEndingFind(tx, 'telnyx', 'early-caller')).toEqual({
        ended_at: T0,
        hangup_cause: 'normal_clearing',
      });
      expect(await legEndingRecord(tx, 'othercarrier', 'early-caller', T0, 'timeout')).toBe(true);
    }));
});

describe('reconciliation bookkeeping touches only what is still up', () => {
  it('a leg still up records when the carrier was asked; an ended one is left as it was', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const status of LEG_STATUSES) {
        const l = await leg(tx, { status });
        await legMarkChecked(tx, l.id, later(90));
        const up = l.ended_at === null;
        expect(await reread(tx, 'call_legs', l), status).toEqual(up ? { ...l, checked_at: later(90) } : l);
      }
    }));

  it('a call still up records when its caller was checked; an ended one is left as it was', () =>
    inRolledBackTx(db.pool, async (tx) => {
      for (const status of CALL_STATUSES) {
        const c = await call(tx, { status, direction: 'inbound' });
        await callMarkCallerChecked(tx, c.id, later(90));
        const up = c.ended_at === null;
        expect(await reread(tx, 'calls', c), status).toEqual(up ? { ...c, caller_checked_at: later(90) } : c);
      }
    }));
});
