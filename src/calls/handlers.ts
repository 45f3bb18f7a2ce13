// Carrier events about calls. A leg is found through the client_state we put on
// its dial (call, leg, position), else by its call_control_id; an inbound caller
// by its call_control_id. Every handler locks the call row first, so all of one
// call's transitions serialize in one order (no deadlocks); the guards in the
// UPDATEs still decide what applies.

import type { CarrierEvent } from '../carrier/carrier.js';
import { NotReadyError, type HandlerContext, type HandlerRegistry, type HandlerResult } from '../carrier/process.js';
import type { Tx } from '../db/tx.js';
import { enqueue } from '../jobs/enqueue.js';
import { numberByE164 } from '../numbers/numbers.js';
import { emit } from '../outbox/outbox.js';
import { afterCallEnded, callResource, hangUp, rejectCaller, ringOn, startLeg } from './calls.js';
import {
  callAnswer,
  callByCallerControlId,
  callEnd,
  callInsert,
  callLock,
  legAnswer,
  legByControlId,
  legEnd,
  legGet,
  legsOf,
  legStamp,
  type CallRow,
  type LegRow,
} from './calls.sql.js';

/** What we put in client_state when dialing a leg; Telnyx echoes it on the leg's webhooks. */
export interface LegState {
  c: string;
  l: string;
  p: number;
}

function legState(v: unknown): LegState | null {
  const s = v as Partial<LegState> | null;
  return s && typeof s.c === 'string' && typeof s.l === 'string' && Number.isInteger(s.p) ? (s as LegState) : null;
}

type Found = { call: CallRow; leg: LegRow } | { call: CallRow; caller: true } | null;

async function find(tx: Tx, ev: { callControlId: string; clientState: unknown }): Promise<Found> {
  const ref = legState(ev.clientState);
  const leg = ref ? await legGet(tx, ref.l) : await legByControlId(tx, ev.callControlId);
  if (leg) {
    const call = await callLock(tx, leg.call_id);
    // re-read after the lock: another transaction may have changed the leg meanwhile
    return call ? { call, leg: (await legGet(tx, leg.id))! } : null;
  }
  const caller = await callByCallerControlId(tx, ev.callControlId);
  if (caller) {
    const call = await callLock(tx, caller.id);
    return call ? { call, caller: true } : null;
  }
  return null;
}

// An event whose subject is not there yet waits its turn a few times (~30 s),
// then is let go: a webhook about a leg we never dialed must not retry for hours.
function notYet(ctx: HandlerContext, what: string): HandlerResult {
  if (ctx.attempt < 4) throw new NotReadyError(what);
  return { outcome: 'ignored', reason: `${what}; gave up waiting` };
}

async function inboundCall(tx: Tx, ev: Extract<CarrierEvent, { kind: 'call.initiated' }>, ctx: HandlerContext): Promise<HandlerResult> {
  const number = await numberByE164(tx, ev.to);
  if (!number) {
    await rejectCaller(tx, ev.callControlId);
    return { outcome: 'rejected', reason: `no account owns ${ev.to}` };
  }
  const targets = number.inbound_ring;
  const call = await callInsert(tx, {
    accountId: number.account_id,
    tenantId: number.tenant_id,
    direction: 'inbound',
    from: ev.from,
    number: ev.to,
    plan: { targets, timeout: number.ring_timeout_secs, next: targets.length > 0 ? 1 : 0 },
    carrier: ctx.carrier,
    status: targets.length > 0 ? 'ringing' : 'missed',
    callerLegId: ev.callLegId,
    callerCallControlId: ev.callControlId,
    createdAt: ev.occurredAt,
  });
  if (!call) return { outcome: 'ignored', reason: 'this carrier leg is already a call' };
  await emit(tx, { accountId: call.account_id, tenantId: call.tenant_id, type: 'call.initiated', subjectId: call.id, data: callResource(call, []), occurredAt: ev.occurredAt });
  if (targets.length === 0) {
    // No ring plan: the caller is turned away.
    await rejectCaller(tx, ev.callControlId);
    await emit(tx, { accountId: call.account_id, tenantId: call.tenant_id, type: 'call.missed', subjectId: call.id, data: callResource(call, []), occurredAt: ev.occurredAt });
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
function isStray(leg: LegRow, callControlId: string): boolean {
  return (leg.call_control_id !== null && leg.call_control_id !== callControlId) || leg.status === 'failed' || leg.status === 'canceled';
}

async function legAnswered(tx: Tx, call: CallRow, leg: LegRow, ev: Extract<CarrierEvent, { kind: 'call.answered' }>): Promise<HandlerResult> {
  if (isStray(leg, ev.callControlId)) {
    await hangUp(tx, ev.callControlId);
    return { outcome: 'ignored', reason: 'a carrier leg we no longer want; hung up' };
  }
  await legStamp(tx, leg.id, ev.callControlId, ev.callLegId, ev.occurredAt);
  if (!(await legAnswer(tx, leg.id, ev.occurredAt))) return { outcome: 'ignored', reason: `leg already ${leg.status}` };
  const won = await callAnswer(tx, call.id, leg.id, ev.occurredAt);
  if (!won) {
    // The call was answered by another leg, or ended: this answer loses and the leg is hung up.
    await hangUp(tx, ev.callControlId);
    return { outcome: 'ignored', reason: `call already ${call.status}; leg hung up` };
  }
  await emit(tx, { accountId: won.account_id, tenantId: won.tenant_id, type: 'call.answered', subjectId: won.id, data: callResource(won, await legsOf(tx, won.id)), occurredAt: ev.occurredAt });
  if (won.direction === 'inbound') await enqueue(tx, 'call.connect', { callId: won.id }, { jobKey: `call.connect:${won.id}` });
  return { outcome: 'applied' };
}

async function legHungUp(
  tx: Tx,
  call: CallRow,
  leg: LegRow,
  ev: Extract<CarrierEvent, { kind: 'call.hangup' }>,
  ctx: HandlerContext,
): Promise<HandlerResult> {
  const at = ev.endedAt ?? ev.occurredAt;
  if (isStray(leg, ev.callControlId)) return { outcome: 'ignored', reason: 'not the carrier leg we track' };
  await legStamp(tx, leg.id, ev.callControlId, ev.callLegId, ev.occurredAt);
  // normal_clearing means the leg was connected: if its answer has not been applied
  // yet, the hangup overtook it; wait (a few retries) for the answer rather than
  // ring on past a call that was in fact picked up.
  if (!leg.answered_at && !leg.ended_at && ev.hangupCause === 'normal_clearing' && call.status === 'ringing' && ctx.attempt < 4) {
    throw new NotReadyError(`hangup of leg ${leg.id} arrived before its answer`);
  }
  const ended = await legEnd(tx, leg.id, ev.hangupCause, at);
  if (!ended) return { outcome: 'ignored', reason: 'leg already ended' };

  if (call.answered_leg_id === leg.id) {
    const over = await callEnd(tx, call.id, at);
    if (over) await afterCallEnded(tx, over, { legId: leg.id });
    return over ? { outcome: 'applied' } : { outcome: 'ignored', reason: 'call already ended' };
  }
  if (ended.answered_at) return { outcome: 'ignored', reason: 'a leg that lost the answer' };
  const step = await ringOn(tx, call, leg.position, at);
  return step === 'nothing' ? { outcome: 'ignored', reason: `call ${call.status}; nothing to ring` } : { outcome: 'applied' };
}

export const callHandlers: HandlerRegistry = {
  'call.initiated': async (tx, ev, ctx) => {
    if (ev.direction === 'inbound') return inboundCall(tx, ev, ctx);
    const found = await find(tx, ev);
    if (!found || !('leg' in found)) return { outcome: 'ignored', reason: 'not a leg we dialed' };
    if (isStray(found.leg, ev.callControlId)) {
      await hangUp(tx, ev.callControlId);
      return { outcome: 'ignored', reason: 'a carrier leg we no longer want; hung up' };
    }
    const stamped = await legStamp(tx, found.leg.id, ev.callControlId, ev.callLegId, ev.occurredAt);
    return stamped ? { outcome: 'applied' } : { outcome: 'ignored', reason: 'leg already stamped' };
  },

  'call.answered': async (tx, ev, ctx) => {
    const found = await find(tx, ev);
    if (!found) return notYet(ctx, `no leg with call_control_id ${ev.callControlId} yet`);
    if ('caller' in found) return { outcome: 'ignored', reason: 'the caller was answered by us' };
    return legAnswered(tx, found.call, found.leg, ev);
  },

  'call.hangup': async (tx, ev, ctx) => {
    const found = await find(tx, ev);
    if (!found) return notYet(ctx, `no call or leg with call_control_id ${ev.callControlId} yet`);
    if ('leg' in found) return legHungUp(tx, found.call, found.leg, ev, ctx);
    // The caller hung up: ringing → missed, connected → completed; hang up the rest.
    const over = await callEnd(tx, found.call.id, ev.endedAt ?? ev.occurredAt);
    if (!over) return { outcome: 'ignored', reason: 'call already ended' };
    await afterCallEnded(tx, over, { callerHungUp: true });
    return { outcome: 'applied' };
  },
};
