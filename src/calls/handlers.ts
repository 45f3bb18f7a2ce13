// Carrier events about calls. A leg is found through the state it echoes back
// (the call, leg and position we gave it when we dialed), else by its carrier
// reference; an inbound caller by theirs. Every handler locks the call row first, so all of one
// call's transitions serialize in one order (no deadlocks); the guards in the
// UPDATEs still decide what applies.
//
// Words that arrive before the word they depend on wait by time (NotReadyError,
// the not-ready policy): a hangup that may have overtaken its leg's answer, an
// answer about a leg not stamped yet. A caller's hangup that comes before its
// call exists is kept instead (carrier_leg_endings), and the call.initiated that
// follows, however late, creates the call and ends it missed.

import type { CarrierEvent } from '../carrier/carrier.js';
import { NotReadyError, type HandlerContext, type HandlerRegistry, type HandlerResult } from '../carrier/process.js';
import type { Tx } from '../db/tx.js';
import { enqueue } from '../jobs/enqueue.js';
import { jobKeys } from '../jobs/keys.js';
import { numberAtCarrier } from '../numbers/numbers.sql.js';
import { emit } from '../outbox/outbox.js';
import { requestLookup } from '../reconcile/requests.js';
import { afterCallEnded, callResource, hangUp, rejectCaller, ringOn, startLeg } from './calls.js';
import {
  callAnswer,
  callByCallerRef,
  callEnd,
  callInsert,
  callLock,
  legAnswer,
  legByCarrierRef,
  legEnd,
  legEndingFind,
  legEndingRecord,
  legById,
  legsOf,
  legStamp,
  type CallRow,
  type LegRow,
} from './calls.sql.js';

/** What we give a leg when dialing it; the carrier echoes it back on the leg's events. */
export interface LegState {
  c: string;
  l: string;
  p: number;
}

export function legState(v: unknown): LegState | null {
  const s = v as Partial<LegState> | null;
  return s && typeof s.c === 'string' && typeof s.l === 'string' && Number.isInteger(s.p) ? (s as LegState) : null;
}

type Found = { call: CallRow; leg: LegRow } | { call: CallRow; caller: true } | null;

/** The call a carrier leg belongs to (one of its legs, or its inbound caller), with the call row locked. */
export async function callOfCarrierLeg(tx: Tx, carrier: string, ev: { leg: string; echo: unknown }): Promise<Found> {
  const ref = legState(ev.echo);
  const leg = ref ? await legById(tx, ref.l) : await legByCarrierRef(tx, carrier, ev.leg);
  if (leg) {
    const call = await callLock(tx, leg.call_id);
    // re-read after the lock: another transaction may have changed the leg meanwhile
    return call ? { call, leg: (await legById(tx, leg.id))! } : null;
  }
  const caller = await callByCallerRef(tx, carrier, ev.leg);
  if (caller) {
    const call = await callLock(tx, caller.id);
    return call ? { call, caller: true } : null;
  }
  return null;
}

/** An event whose subject is not there yet waits for the not-ready policy, then is let go. */
export function notYet(ctx: HandlerContext, what: string): HandlerResult {
  if (!ctx.waitedOut) throw new NotReadyError(what);
  return { outcome: 'ignored', reason: `${what}; gave up waiting` };
}

async function inboundCall(
  tx: Tx,
  ev: Extract<CarrierEvent, { kind: 'call.initiated' }>,
  ctx: HandlerContext,
): Promise<HandlerResult> {
  const number = await numberAtCarrier(tx, ctx.carrier, ev.to);
  const gone = await legEndingFind(tx, ctx.carrier, ev.leg);
  if (!number) {
    if (!gone) await rejectCaller(tx, ctx.carrier, ev.leg);
    return { outcome: 'rejected', reason: `no account owns ${ev.to}` };
  }
  const targets = number.inbound_ring;
  const ringing = targets.length > 0 && !gone;
  // Every call arrives ringing. One that ends at once (no ring plan, or a caller
  // already gone) ends by a transition of its own, after call.initiated, so each
  // of its two events carries the call as its own transition left it, with its
  // own sequence, though both commit together.
  const call = await callInsert(tx, {
    accountId: number.account_id,
    tenantId: number.tenant_id,
    direction: 'inbound',
    from: ev.from,
    number: ev.to,
    plan: { targets, timeout: number.ring_timeout_secs, next: ringing ? 1 : 0 },
    carrier: ctx.carrier,
    callerRef: ev.leg,
    createdAt: ev.occurredAt,
    record: number.inbound_record,
    transcribe: number.inbound_transcribe,
  });
  if (!call) return { outcome: 'ignored', reason: 'this carrier leg is already a call' };
  await emit(tx, {
    accountId: call.account_id,
    tenantId: call.tenant_id,
    type: 'call.initiated',
    subjectId: call.id,
    data: callResource(call, []),
    occurredAt: ev.occurredAt,
  });
  if (!ringing) {
    // No ring plan: the caller is turned away. Or the caller had hung up before we
    // heard of the call: nobody is dialed for them.
    if (!gone) await rejectCaller(tx, ctx.carrier, ev.leg);
    const missed = await callEnd(tx, call.id, gone?.ended_at ?? ev.occurredAt);
    if (!missed) throw new Error(`call ${call.id}, inserted in this transaction, could not be ended`);
    await emit(tx, {
      accountId: missed.account_id,
      tenantId: missed.tenant_id,
      type: 'call.missed',
      subjectId: missed.id,
      data: callResource(missed, []),
      occurredAt: missed.ended_at!,
    });
    return { outcome: 'applied' };
  }
  // The caller stays parked (hearing ringback) until a target answers; call.connect then answers and bridges.
  await startLeg(tx, call, 0);
  return { outcome: 'applied' };
}

/**
 * A carrier leg that carries our leg's client_state but is not (or no longer)
 * that leg: a dial we gave up on that went through after all, or a second dial
 * after the command_id window. It must not move our leg; if it is up, hang it up.
 */
function isStray(leg: LegRow, carrierRef: string): boolean {
  return (
    (leg.carrier_ref !== null && leg.carrier_ref !== carrierRef) || leg.status === 'failed' || leg.status === 'canceled'
  );
}

async function legAnswered(
  tx: Tx,
  call: CallRow,
  leg: LegRow,
  ev: Extract<CarrierEvent, { kind: 'call.answered' }>,
): Promise<HandlerResult> {
  if (isStray(leg, ev.leg)) {
    await hangUp(tx, call.carrier, ev.leg);
    return { outcome: 'ignored', reason: 'a carrier leg we no longer want; hung up' };
  }
  await legStamp(tx, leg.id, ev.leg, ev.occurredAt);
  if (!(await legAnswer(tx, leg.id, ev.occurredAt, ev.source === 'reconciliation')))
    return { outcome: 'ignored', reason: `leg already ${leg.status}` };
  const won = await callAnswer(tx, call.id, leg.id, ev.occurredAt);
  if (!won) {
    // The call was answered by another leg, or ended: this answer loses and the leg is hung up.
    await hangUp(tx, call.carrier, ev.leg);
    return { outcome: 'ignored', reason: `call already ${call.status}; leg hung up` };
  }
  await emit(tx, {
    accountId: won.account_id,
    tenantId: won.tenant_id,
    type: 'call.answered',
    subjectId: won.id,
    data: callResource(won, await legsOf(tx, won.id)),
    occurredAt: ev.occurredAt,
  });
  if (won.direction === 'inbound')
    await enqueue(tx, 'call.connect', { callId: won.id }, { jobKey: jobKeys.connect(won.id) });
  // An inbound call is recorded once its caller is bridged (call.connect); an outbound one now that it is answered.
  else if (won.record) await enqueue(tx, 'call.record', { callId: won.id }, { jobKey: jobKeys.record(won.id) });
  return { outcome: 'applied' };
}

async function legHungUp(
  tx: Tx,
  call: CallRow,
  leg: LegRow,
  ev: Extract<CarrierEvent, { kind: 'call.hangup' }>,
  ctx: HandlerContext,
): Promise<HandlerResult> {
  // Reconciliation's "never connected" is its conclusion about a leg it found with no
  // answer; applied to a leg whose answer has since been applied, its end time is a
  // guess (the ring timeout). Such a leg ends when the carrier last said it was alive,
  // as reconciliation ends any answered leg the carrier no longer knows: nothing unproven is billed.
  const guessed = ev.source === 'reconciliation' && ev.connected === false && leg.answered_at !== null;
  const at = guessed ? (leg.checked_at ?? leg.answered_at!) : (ev.endedAt ?? ev.occurredAt);
  if (isStray(leg, ev.leg)) return { outcome: 'ignored', reason: 'not the carrier leg we track' };
  await legStamp(tx, leg.id, ev.leg, ev.occurredAt);
  // A hangup of a leg we have no answer for, while the call still rings: unless
  // the hangup itself rules an answer out (a timeout, busy…), the answer may be
  // on its way — overtaken, or stored but not yet applied (its worker crashed).
  // Ringing on past a call that was in fact picked up would dial the next target,
  // so wait: never while that answer is stored, and otherwise for the not-ready
  // policy. A hangup that says the leg was connected and still has no answer then
  // asks the carrier, who knows; one that cannot tell is taken as no answer.
  if (!leg.answered_at && !leg.ended_at && call.status === 'ringing') {
    // A stored answer goes first even when this hangup says the leg never connected:
    // that may be reconciliation's guess, made before the answer arrived.
    if (await ctx.pendingAbout('call.answered', ev.leg)) {
      throw new NotReadyError(`the answer of leg ${leg.id} is stored but not applied yet`);
    }
    if (ev.connected !== false && !ctx.waitedOut) {
      throw new NotReadyError(`hangup of leg ${leg.id} arrived before its answer`);
    }
    if (ev.connected === true && ev.source === 'webhook') {
      throw new NotReadyError(`leg ${leg.id} was connected but its answer never came; asking the carrier`, (t) =>
        requestLookup(t, { kind: 'leg', legId: leg.id }),
      );
    }
  }
  const ended = await legEnd(tx, leg.id, ev.hangupCause, at, ev.source === 'reconciliation');
  if (!ended) return { outcome: 'ignored', reason: 'leg already ended' };

  if (call.answered_leg_id === leg.id) {
    const over = await callEnd(tx, call.id, at);
    if (over) await afterCallEnded(tx, over, { legId: leg.id });
    return over ? { outcome: 'applied' } : { outcome: 'ignored', reason: 'call already ended' };
  }
  if (ended.answered_at) return { outcome: 'ignored', reason: 'a leg that lost the answer' };
  const step = await ringOn(tx, call, leg.position, at);
  return step === 'nothing'
    ? { outcome: 'ignored', reason: `call ${call.status}; nothing to ring` }
    : { outcome: 'applied' };
}

export const callHandlers: HandlerRegistry = {
  'call.initiated': async (tx, ev, ctx) => {
    if (ev.direction === 'inbound') return inboundCall(tx, ev, ctx);
    const found = await callOfCarrierLeg(tx, ctx.carrier, ev);
    if (!found || !('leg' in found)) return { outcome: 'ignored', reason: 'not a leg we dialed' };
    if (isStray(found.leg, ev.leg)) {
      await hangUp(tx, ctx.carrier, ev.leg);
      return { outcome: 'ignored', reason: 'a carrier leg we no longer want; hung up' };
    }
    const stamped = await legStamp(tx, found.leg.id, ev.leg, ev.occurredAt);
    return stamped ? { outcome: 'applied' } : { outcome: 'ignored', reason: 'leg already stamped' };
  },

  'call.answered': async (tx, ev, ctx) => {
    const found = await callOfCarrierLeg(tx, ctx.carrier, ev);
    if (!found) return notYet(ctx, `no leg with carrier reference ${ev.leg} yet`);
    if ('caller' in found) return { outcome: 'ignored', reason: 'the caller was answered by us' };
    return legAnswered(tx, found.call, found.leg, ev);
  },

  'call.hangup': async (tx, ev, ctx) => {
    const found = await callOfCarrierLeg(tx, ctx.carrier, ev);
    const at = ev.endedAt ?? ev.occurredAt;
    if (!found) {
      // Not a call of ours yet: an inbound caller who gave up before their
      // call.initiated was processed. The call, when it comes, honours this.
      const kept = await legEndingRecord(tx, ctx.carrier, ev.leg, at, ev.hangupCause);
      return {
        outcome: 'ignored',
        reason: kept ? 'no call has this carrier leg yet; its ending is kept' : 'ending already kept',
      };
    }
    if ('leg' in found) return legHungUp(tx, found.call, found.leg, ev, ctx);
    // The caller hung up: ringing → missed, connected → completed; hang up the rest.
    const over = await callEnd(tx, found.call.id, at, { callerReconciled: ev.source === 'reconciliation' });
    if (!over) return { outcome: 'ignored', reason: 'call already ended' };
    await afterCallEnded(tx, over, { callerHungUp: true });
    return { outcome: 'applied' };
  },
};
