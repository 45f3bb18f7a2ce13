// The jobs that talk to the carrier about calls. Each was enqueued in the
// transaction that decided it and carries a command_id the carrier de-duplicates
// for 60 s, so a job re-run soon after a crash or a lost answer does not dial or
// act twice; a re-run later than that is made harmless by the state it finds
// (a leg already stamped, a call already over, a caller already answered).
//
// call.dial: if the call is no longer ringing when the job runs, the leg is
// canceled and nobody is dialed. Otherwise dial (command_id = the leg id) and
// stamp the leg; if the call ended while we were dialing, hang the new leg up. A
// refused dial fails the leg and rings on; a carrier that does not answer is
// retried quickly (inside the command_id window), then treated as refused.

import type pg from 'pg';
import type { CarrierClient } from '../carrier/carrier.js';
import { withTx } from '../db/tx.js';
import { enqueue } from '../jobs/enqueue.js';
import type { TaskHandler } from '../jobs/runner.js';
import type { Logger } from '../telemetry/log.js';
import { afterCallEnded, hangUp, ringOn } from './calls.js';
import { callById, callEnd, callLock, legAbandon, legGet, legStamp } from './calls.sql.js';
import type { LegState } from './handlers.js';

export interface CallCommandDeps {
  pool: pg.Pool;
  carrier: CarrierClient;
  log: Logger;
}

const DIAL_ATTEMPTS = 4; // retries at 2, 4, 8 s: all inside Telnyx's 60 s command_id window

export async function dialLeg(deps: CallCommandDeps, legId: string, attempt = 1): Promise<'dialed' | 'canceled' | 'refused' | 'retrying' | 'nothing'> {
  const leg = await legGet(deps.pool, legId);
  if (!leg || leg.status !== 'dialing' || leg.ended_at) return 'nothing';
  const call = await callById(deps.pool, leg.call_id);
  if (!call || call.status !== 'ringing') {
    await withTx(deps.pool, async (tx) => {
      await callLock(tx, leg.call_id);
      await legAbandon(tx, leg.id, 'canceled', 'call_ended_before_dial', new Date());
    });
    return 'canceled';
  }

  const state: LegState = { c: leg.call_id, l: leg.id, p: leg.position };
  const result = await deps.carrier.dial({
    from: call.number,
    to: leg.to_number,
    timeoutSecs: call.ring_plan.timeout,
    clientState: state,
    commandId: leg.id,
  });

  if (result.ok) {
    await withTx(deps.pool, async (tx) => {
      const locked = await callLock(tx, leg.call_id);
      await legStamp(tx, leg.id, result.callControlId, result.callLegId, new Date());
      // The call was answered by another leg, or ended, while this dial was in flight.
      // (It may also have left `ringing` because this very leg answered already.)
      if (locked && locked.status !== 'ringing' && locked.answered_leg_id !== leg.id) {
        await hangUp(tx, result.callControlId);
      }
    });
    return 'dialed';
  }
  if (result.kind === 'retry' && attempt < DIAL_ATTEMPTS) {
    await withTx(deps.pool, (tx) =>
      enqueue(tx, 'call.dial', { legId, attempt: attempt + 1 }, { runAt: new Date(Date.now() + 2 ** attempt * 1000), jobKey: `call.dial:${legId}` }),
    );
    return 'retrying';
  }
  const cause = result.kind === 'rejected' ? `dial_refused:${result.code}` : 'carrier_unavailable';
  deps.log.warn({ legId, cause, detail: result.detail }, 'dial failed; ringing on');
  await withTx(deps.pool, async (tx) => {
    const locked = await callLock(tx, leg.call_id);
    const failed = await legAbandon(tx, leg.id, 'failed', cause, new Date());
    if (failed && locked) await ringOn(tx, locked, leg.position, new Date());
  });
  return 'refused';
}

export function dialTask(deps: CallCommandDeps): TaskHandler<'call.dial'> {
  return async (payload) => {
    await dialLeg(deps, payload.legId, payload.attempt ?? 1);
  };
}

/** hangup / reject / answer; "the call has already ended" counts as done. */
export function commandTask(deps: CallCommandDeps): TaskHandler<'call.command'> {
  return async (payload) => {
    const r = await deps.carrier.callAction(payload.callControlId, { action: payload.action }, payload.commandId);
    if (r.ok) return;
    if (r.kind === 'retry') throw new Error(`${payload.action} ${payload.callControlId}: ${r.detail}`);
    deps.log.warn({ ...payload, code: r.code, detail: r.detail }, 'carrier refused a call command');
  };
}

/** Inbound: answer the parked caller, then bridge them to the leg that answered. */
export function connectTask(deps: CallCommandDeps): TaskHandler<'call.connect'> {
  return async ({ callId }) => {
    const call = await callById(deps.pool, callId);
    if (!call || call.status !== 'in_progress' || !call.caller_call_control_id || !call.answered_leg_id) return;
    const leg = await legGet(deps.pool, call.answered_leg_id);
    if (!leg?.call_control_id) throw new Error(`answered leg of ${callId} has no call_control_id yet`);
    const caller = call.caller_call_control_id;
    const answered = await deps.carrier.callAction(caller, { action: 'answer' }, `answer:${callId}`);
    if (!answered.ok && answered.kind === 'retry') throw new Error(`answer ${caller}: ${answered.detail}`);
    if (answered.ok && answered.alreadyEnded) {
      // The caller is gone. Their hangup ends the call when we get it, but it may
      // have come so long before the call itself that it was given up on: end the
      // call here as it would (the guard makes whichever comes second a no-op),
      // which hangs up the leg that answered instead of leaving it on a dead line.
      await withTx(deps.pool, async (tx) => {
        const over = await callEnd(tx, callId, new Date());
        if (over) await afterCallEnded(tx, over, { callerHungUp: true });
      });
      return;
    }
    // A refused answer usually means an earlier run of this job answered already
    // (outside the carrier's 60 s command_id window): go on and bridge.
    if (!answered.ok) deps.log.warn({ callId, code: answered.code }, 'the carrier refused to answer the caller; bridging anyway');
    const bridged = await deps.carrier.callAction(caller, { action: 'bridge', otherCallControlId: leg.call_control_id }, `bridge:${callId}`);
    if (!bridged.ok && bridged.kind === 'retry') throw new Error(`bridge ${caller}: ${bridged.detail}`);
  };
}
