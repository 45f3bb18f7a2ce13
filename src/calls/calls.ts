// Calls with sequential ring: a call rings its targets one at a time until one
// answers. Every step is a guarded transition and everything that follows it —
// the next leg and its dial job, the bill, the customer event, the hang-up and
// bridge commands — happens only when that statement changed a row, in the same
// transaction. Carrier commands go out as jobs enqueued in the transaction that
// decided them, each with a command key the carrier de-duplicates. A call goes
// through its number's carrier.

import { type Refusal, refuse } from '../api/refusal.js';
import { bill } from '../billing/usage.sql.js';
import type { Tx } from '../db/tx.js';
import { enqueue } from '../jobs/enqueue.js';
import { jobKeys } from '../jobs/keys.js';
import { numberOwned } from '../numbers/numbers.sql.js';
import { emit } from '../outbox/outbox.js';
import { requestLookup } from '../reconcile/requests.js';
import {
  callClaimNext,
  callEnd,
  callInsert,
  legAbandon,
  legInsert,
  legsOf,
  type CallRow,
  type LegRow,
} from './calls.sql.js';

export const MAX_TARGETS = 10;

export function callResource(c: CallRow, legs: LegRow[]) {
  return {
    id: c.id,
    direction: c.direction,
    from: c.from_number,
    to: c.ring_plan.targets,
    number: c.number,
    status: c.status,
    ring_timeout_secs: c.ring_plan.timeout,
    tenant_id: c.tenant_id,
    answered_at: c.answered_at?.toISOString() ?? null,
    ended_at: c.ended_at?.toISOString() ?? null,
    duration_seconds: c.duration_seconds,
    record: c.record,
    transcribe: c.transcribe,
    recording_error: c.recording_error,
    created_at: c.created_at.toISOString(),
    sequence: c.sequence,
    legs: legs.map((l) => ({
      id: l.id,
      position: l.position,
      to: l.to_number,
      status: l.status,
      hangup_cause: l.hangup_cause,
      dialed_at: l.dialed_at?.toISOString() ?? null,
      answered_at: l.answered_at?.toISOString() ?? null,
      ended_at: l.ended_at?.toISOString() ?? null,
      reconciled: l.reconciled,
    })),
  };
}

/** An outbound call: the call, the claim of position 0, its leg and its dial job, in one transaction. */
export async function createOutboundCall(
  tx: Tx,
  c: { accountId: string; from: string; to: string[]; ringTimeoutSecs: number; record: boolean; transcribe: boolean },
  carriesCalls: (carrier: string) => boolean,
): Promise<CallRow | Refusal> {
  const number = await numberOwned(tx, c.accountId, c.from);
  if (!number) return refuse('from_not_owned', `${c.from} is not one of this account's phone numbers`, 'from');
  if (!carriesCalls(number.carrier)) {
    return refuse('voice_not_supported', `${c.from}'s carrier (${number.carrier}) carries no calls here`, 'from');
  }
  const call = await callInsert(tx, {
    accountId: c.accountId,
    tenantId: number.tenant_id,
    direction: 'outbound',
    from: c.from,
    number: c.from,
    plan: { targets: c.to, timeout: c.ringTimeoutSecs, next: 1 },
    carrier: number.carrier,
    record: c.record || c.transcribe,
    transcribe: c.transcribe,
  });
  await startLeg(tx, call!, 0);
  return call!;
}

/** Inserts the leg for a claimed position and its dial job. */
export async function startLeg(tx: Tx, call: CallRow, position: number): Promise<LegRow> {
  const leg = await legInsert(tx, call, position, call.ring_plan.targets[position]!);
  await enqueue(tx, 'call.dial', { legId: leg.id }, { jobKey: jobKeys.dial(leg.id) });
  return leg;
}

/**
 * The leg at `position` ended without answering: try to move the ring on. The
 * expected cursor comes from that leg's position, never from re-reading the row,
 * so of two workers handling the same hangup only one claims the next turn.
 * Past the last target the call ends missed.
 */
export async function ringOn(
  tx: Tx,
  call: CallRow,
  position: number,
  at: Date,
): Promise<'dialing_next' | 'missed' | 'nothing'> {
  const next = position + 1;
  if (next < call.ring_plan.targets.length) {
    const claimed = await callClaimNext(tx, call.id, next);
    if (!claimed) return 'nothing';
    await startLeg(tx, claimed, next);
    return 'dialing_next';
  }
  const ended = await callEnd(tx, call.id, at, { ringCursor: next });
  if (!ended) return 'nothing';
  await afterCallEnded(tx, ended, {});
  return 'missed';
}

/**
 * Effects of a call that just ended (the callEnd statement changed its row):
 * the minutes billed if it was answered, one call.completed or call.missed, and
 * hang-ups for whatever is still up (except what hung up itself).
 */
export async function afterCallEnded(
  tx: Tx,
  call: CallRow,
  except: { legId?: string; callerHungUp?: boolean },
): Promise<void> {
  const legs = await legsOf(tx, call.id);
  if (call.status === 'completed') {
    await bill(tx, {
      accountId: call.account_id,
      tenantId: call.tenant_id,
      kind: 'call_minute',
      quantity: Math.ceil((call.duration_seconds ?? 0) / 60),
      sourceId: call.id,
      occurredAt: call.ended_at!,
    });
  }
  for (const leg of legs) {
    if (leg.ended_at || leg.id === except.legId) continue;
    if (leg.status === 'dialing') await legAbandon(tx, leg.id, 'canceled', 'call_ended', call.ended_at!);
    else if (leg.carrier_ref) await hangUp(tx, call.carrier, leg.carrier_ref);
  }
  if (call.direction === 'inbound' && call.caller_ref && !except.callerHungUp) {
    await hangUp(tx, call.carrier, call.caller_ref);
  }
  // A recorded call's recording is waited for, and asked about if it does not come.
  if (call.status === 'completed' && call.record) await requestLookup(tx, { kind: 'recording', callId: call.id });
  // The hangup that ended the call starts its transcription; a duplicate hangup ends nothing and starts nothing.
  if (call.status === 'completed' && call.transcribe) {
    await enqueue(
      tx,
      'recording.transcribe',
      { callId: call.id, since: call.ended_at!.toISOString() },
      { jobKey: jobKeys.transcribe(call.id) },
    );
  }
  await emit(tx, {
    accountId: call.account_id,
    tenantId: call.tenant_id,
    type: call.status === 'completed' ? 'call.completed' : 'call.missed',
    subjectId: call.id,
    data: callResource(call, await legsOf(tx, call.id)),
    occurredAt: call.ended_at!,
  });
}

/**
 * Hangs a carrier leg up. Every decision to hang up the same leg (the call
 * ended, an answer lost, a stray leg turned up) shares one job key and one
 * command key, so they collapse into one command at the carrier.
 */
export function hangUp(tx: Tx, carrier: string, carrierRef: string): Promise<void> {
  return command(tx, carrier, carrierRef, 'hangup');
}

export function rejectCaller(tx: Tx, carrier: string, carrierRef: string): Promise<void> {
  return command(tx, carrier, carrierRef, 'reject');
}

function command(tx: Tx, carrier: string, carrierRef: string, action: 'hangup' | 'reject'): Promise<void> {
  const commandKey = jobKeys.command(action, carrierRef);
  return enqueue(tx, 'call.command', { carrier, carrierRef, action, commandKey }, { jobKey: commandKey });
}
