// The jobs that talk to the carrier about calls. Each was enqueued in the
// transaction that decided it. A dial carries the leg id as its Idempotency-Key
// (and as its command_id), so a re-run after a crash or a lost answer learns the
// first dial's leg instead of dialing again; the other commands carry a
// command_id the carrier de-duplicates for 60 s, and a repeat after that is made
// harmless by the state it finds (a leg already ended, a caller already answered).
// A carrier that does not answer is retried by the job re-enqueuing itself per
// its retry policy (jobs/retry.ts).
//
// call.dial: if the call is no longer ringing when the job runs, the leg is
// canceled and nobody is dialed. Otherwise dial and stamp the leg; if the call
// ended while we were dialing, hang the new leg up. A refused dial fails the leg
// and rings on, and so does a dial the carrier never answered within its policy
// (should that dial have gone through after all, its webhooks find a failed leg
// and the carrier leg is hung up).

import type pg from 'pg';
import { withTx } from '../db/tx.js';
import { type Carriers, voiceOf } from '../carrier/registry.js';
import { enqueue } from '../jobs/enqueue.js';
import { jobKeys } from '../jobs/keys.js';
import { decideRetry, type RetryPolicies, retryLater } from '../jobs/retry.js';
import type { TaskHandler } from '../jobs/runner.js';
import { requestLookup } from '../reconcile/requests.js';
import type { Logger } from '../telemetry/log.js';
import { hangUp, ringOn } from './calls.js';
import { callById, callLock, legAbandon, legById, legStamp } from './calls.sql.js';
import type { LegState } from './handlers.js';

export interface CallCommandDeps {
  pool: pg.Pool;
  carriers: Carriers;
  log: Logger;
  policies: Pick<RetryPolicies, 'dial' | 'command'>;
  /** The clock; a parameter so tests move time instead of sleeping. */
  now?: () => Date;
}

export async function dialLeg(
  deps: CallCommandDeps,
  legId: string,
  attempt = 1,
): Promise<'dialed' | 'canceled' | 'refused' | 'retrying' | 'nothing'> {
  const leg = await legById(deps.pool, legId);
  if (leg?.status !== 'dialing' || leg.ended_at) return 'nothing';
  const call = await callById(deps.pool, leg.call_id);
  if (call?.status !== 'ringing') {
    await withTx(deps.pool, async (tx) => {
      await callLock(tx, leg.call_id);
      await legAbandon(tx, leg.id, 'canceled', 'call_ended_before_dial', new Date());
    });
    return 'canceled';
  }

  const state: LegState = { c: leg.call_id, l: leg.id, p: leg.position };
  const result = await voiceOf(deps.carriers, call.carrier).dial({
    from: call.number,
    to: leg.to_number,
    timeoutSecs: call.ring_plan.timeout,
    echo: state,
    commandKey: leg.id,
    idempotencyKey: leg.id,
  });

  if (result.ok) {
    await withTx(deps.pool, async (tx) => {
      const locked = await callLock(tx, leg.call_id);
      await legStamp(tx, leg.id, result.leg, new Date());
      // The call was answered by another leg, or ended, while this dial was in flight.
      // (It may also have left `ringing` because this very leg answered already.)
      if (locked && locked.status !== 'ringing' && locked.answered_leg_id !== leg.id) {
        await hangUp(tx, call.carrier, result.leg);
      }
    });
    return 'dialed';
  }
  const now = deps.now?.() ?? new Date();
  const next =
    result.kind === 'retry'
      ? decideRetry(deps.policies.dial, { attempt, since: leg.created_at, now, retryAfterMs: result.retryAfterMs })
      : null;
  if (next?.retry) {
    await withTx(deps.pool, (tx) =>
      enqueue(tx, 'call.dial', { legId, attempt: attempt + 1 }, { runAt: next.runAt, jobKey: jobKeys.dial(legId) }),
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

/** hangup / reject; "the call has already ended" counts as done. */
export function commandTask(deps: CallCommandDeps): TaskHandler<'call.command'> {
  return async (payload) => {
    const r = await voiceOf(deps.carriers, payload.carrier).callAction(
      payload.carrierRef,
      { action: payload.action },
      payload.commandKey,
    );
    if (r.ok) return;
    if (r.kind === 'rejected') {
      deps.log.warn({ ...payload, code: r.code, detail: r.detail }, 'carrier refused a call command');
      return;
    }
    await retryCommand(deps, 'call.command', payload, r.retryAfterMs, r.detail, payload.commandKey);
  };
}

/** Re-enqueues a command whose carrier did not answer, per the command policy; false once it gives up. */
async function retryCommand<K extends 'call.command' | 'call.connect'>(
  deps: CallCommandDeps,
  task: K,
  payload: GraphileWorker.Tasks[K],
  retryAfterMs: number | null,
  detail: string,
  jobKey: string,
): Promise<boolean> {
  const now = deps.now?.() ?? new Date();
  const retried = await retryLater(deps.pool, deps.policies.command, task, payload, jobKey, { now, retryAfterMs });
  if (!retried) {
    deps.log.error(
      { task, payload, detail },
      'the carrier did not take a call command within its retry window; giving up',
    );
  }
  return retried;
}

/**
 * Inbound: answer the parked caller, then bridge them to the leg that answered.
 * A caller found gone (the carrier says the call has ended) is looked up: the
 * carrier's record of their hangup ends the call at the carrier's time, like
 * the hangup webhook would have, and hangs up the leg that answered.
 */
export function connectTask(deps: CallCommandDeps): TaskHandler<'call.connect'> {
  return async (payload) => {
    const { callId } = payload;
    const jobKey = jobKeys.connect(callId);
    const call = await callById(deps.pool, callId);
    if (call?.status !== 'in_progress' || !call.caller_ref || !call.answered_leg_id) return;
    const leg = await legById(deps.pool, call.answered_leg_id);
    const caller = call.caller_ref;
    const voice = voiceOf(deps.carriers, call.carrier);
    if (!leg?.carrier_ref) {
      await retryCommand(deps, 'call.connect', payload, null, 'the answered leg is not stamped yet', jobKey);
      return;
    }
    const answered = await voice.callAction(caller, { action: 'answer' }, `answer:${callId}`);
    if (!answered.ok && answered.kind === 'retry') {
      await retryCommand(deps, 'call.connect', payload, answered.retryAfterMs, answered.detail, jobKey);
      return;
    }
    if (answered.ok && answered.alreadyEnded) {
      await withTx(deps.pool, (tx) => requestLookup(tx, { kind: 'caller', callId }));
      return;
    }
    // A refused answer usually means an earlier run of this job answered already
    // (after the carrier stopped de-duplicating its command key): go on and bridge.
    if (!answered.ok)
      deps.log.warn({ callId, code: answered.code }, 'the carrier refused to answer the caller; bridging anyway');
    const bridged = await voice.callAction(caller, { action: 'bridge', otherLeg: leg.carrier_ref }, `bridge:${callId}`);
    if (bridged.ok) {
      // Bridged: both parties can now be heard on the caller's leg, which is what gets recorded.
      if (call.record) {
        await withTx(deps.pool, (tx) => enqueue(tx, 'call.record', { callId }, { jobKey: jobKeys.record(callId) }));
      }
      return;
    }
    if (bridged.kind === 'retry') {
      await retryCommand(deps, 'call.connect', payload, bridged.retryAfterMs, bridged.detail, jobKey);
      return;
    }
    // Both parties are up but will never hear each other: hang up both, and their
    // hangups end the call at the carrier's times.
    deps.log.error(
      { callId, code: bridged.code, detail: bridged.detail },
      'the carrier refused to bridge the caller; hanging up both legs',
    );
    await withTx(deps.pool, async (tx) => {
      await hangUp(tx, call.carrier, caller);
      await hangUp(tx, call.carrier, leg.carrier_ref!);
    });
  };
}
