// Reconciliation: when the carrier is silent, ask it. A webhook can be late or
// lost for good (the carrier retries a few times within seconds, then drops it),
// and nothing may wait forever for one: a ringing leg past its ring timeout, an
// answered call, a parked inbound caller, a sent message without a terminal
// receipt, a recorded call that ended without its recording — each, once past
// its bound, is looked up at the carrier's REST API.
//
// What the carrier answers is never applied here. It is written as the events the
// carrier's webhooks would have carried (the adapter's `reconciled`), with
// deterministic ids, and stored through the same store-once statement as ingest
// (carrier_events + the processing job), so the same handlers and guards apply
// it, and a real webhook arriving later finds nothing left to do. Durations and
// times come from the carrier's answer (its timestamps, its Date header), never
// from our clock. Lookups are batched, spaced and bounded per pass, so a backlog
// does not hammer the carrier; whatever a pass leaves is first in line next time.
//
// Two ways in: the scheduled pass (`reconcile`, every HANDSET_RECONCILE_INTERVAL,
// also `handset reconcile`), and one lookup a handler asks for now
// (`reconcile.lookup`, see requests.ts; a recording is always asked about this
// way, from the hangup that ended its call, until it is settled).

import { setTimeout as sleep } from 'node:timers/promises';
import type pg from 'pg';
import {
  callById,
  callersAwaitingCarrier,
  callMarkCallerChecked,
  legById,
  legMarkChecked,
  legsAwaitingCarrier,
  type CallRow,
  type LegRow,
} from '../calls/calls.sql.js';
import type { LegState } from '../calls/handlers.js';
import type { ReconciledEvent, ReconciledFact, ReconciledLeg } from '../carrier/carrier.js';
import { carrierEventPayloadsAbout, carrierEventPendingAbout, carrierEventStoreMany } from '../carrier/events.sql.js';
import { type Carriers, carrierNamed, clientOf, voiceOf } from '../carrier/registry.js';
import { withTx } from '../db/tx.js';
import { enqueue } from '../jobs/enqueue.js';
import { jobKeys, type LookupTarget } from '../jobs/keys.js';
import type { TaskHandler } from '../jobs/runner.js';
import { messageById, messageMarkChecked, messagesAwaitingReceipt, type MessageRow } from '../messages/messages.sql.js';
import { recordingsOfCall } from '../recordings/recordings.sql.js';
import type { Logger } from '../telemetry/log.js';
import type { Metrics } from '../telemetry/metrics.js';
import { boundsRecord } from './bounds.sql.js';
import { requestLookup } from './requests.js';

export interface ReconcileDeps {
  pool: pg.Pool;
  /** Each resource is asked about at, and its facts written in the format of, its own carrier. */
  carriers: Carriers;
  log: Logger;
  metrics?: Metrics;
  intervalMs: number;
  afterMs: number;
  messageAfterMs: number;
  /** The clock; a parameter so tests move time instead of sleeping. */
  now?: () => Date;
}

/** At most this many lookups per pass; the rest wait for the next one (least recently asked first). */
export const LOOKUPS_PER_PASS = 500;
/** Lookups in flight at once, and their pace: the carrier's API is shared with every send and dial. */
const LOOKUP_CONCURRENCY = 4;
const LOOKUPS_PER_SECOND = 20;

/** `waiting`: not asked yet (a recording is first asked about one HANDSET_RECONCILE_AFTER after its call ended). */
export type LookupOutcome = 'applied' | 'alive' | 'unchanged' | 'unreachable' | 'gone' | 'waiting';

/**
 * A recorded call's recording counts as never coming once the carrier, asked
 * once a HANDSET_RECONCILE_AFTER from one bound after the call ended, has listed
 * none this many times: it saves a recording seconds after the call ends. Counted
 * in lookups rather than compared clocks, so a carrier clock that runs ahead of
 * ours neither hurries nor delays the conclusion.
 */
export const RECORDING_MISSING_AFTER = 10;

export interface Candidate {
  target: LookupTarget;
  /** What is waiting and why it is asked about, for `handset reconcile --dry-run`. */
  why: string;
}

/** Everything waiting past its bound, up to LOOKUPS_PER_PASS. */
export async function reconcileCandidates(deps: ReconcileDeps, now: Date): Promise<Candidate[]> {
  // Asked again once it was last asked more than half an interval ago: a pass is
  // paced, so what the previous pass asked late is still due now (once a pass).
  const gap = deps.intervalMs / 2;
  const legs = await legsAwaitingCarrier(deps.pool, now, deps.afterMs, gap, LOOKUPS_PER_PASS);
  const callers = await callersAwaitingCarrier(deps.pool, now, deps.afterMs, gap, LOOKUPS_PER_PASS - legs.length);
  const messages = await messagesAwaitingReceipt(
    deps.pool,
    now,
    deps.messageAfterMs,
    LOOKUPS_PER_PASS - legs.length - callers.length,
  );
  return [
    ...legs.map((l) => ({
      target: { kind: 'leg' as const, legId: l.id },
      why: l.answered_at
        ? `leg ${l.id} of ${l.call_id} answered at ${l.answered_at.toISOString()}, no hangup${l.checked_at ? ` (alive at ${l.checked_at.toISOString()})` : ''}`
        : `leg ${l.id} of ${l.call_id} ringing since ${l.dialed_at?.toISOString()}, past its ${l.ring_timeout_secs} s ring timeout`,
    })),
    ...callers.map((c) => ({
      target: { kind: 'caller' as const, callId: c.id },
      why: `caller of ${c.id} (${c.status}) since ${c.created_at.toISOString()}${c.caller_checked_at ? `, alive at ${c.caller_checked_at.toISOString()}` : ''}`,
    })),
    ...messages.map((m) => ({
      target: { kind: 'message' as const, messageId: m.id },
      why: `message ${m.id} sent at ${m.sent_at?.toISOString()}, no terminal receipt`,
    })),
  ];
}

/** One scheduled pass: looks up every candidate, paced. Returns how each lookup came out. */
export async function reconcilePass(deps: ReconcileDeps): Promise<Record<LookupOutcome, number>> {
  const now = deps.now?.() ?? new Date();
  const candidates = await reconcileCandidates(deps, now);
  const tally: Record<LookupOutcome, number> = {
    applied: 0,
    alive: 0,
    unchanged: 0,
    unreachable: 0,
    gone: 0,
    waiting: 0,
  };
  let next = 0;
  const spacing = (1000 * LOOKUP_CONCURRENCY) / LOOKUPS_PER_SECOND;
  await Promise.all(
    Array.from({ length: Math.min(LOOKUP_CONCURRENCY, candidates.length) }, async () => {
      for (let i = next++; i < candidates.length; i = next++) {
        const started = Date.now();
        try {
          tally[await lookUp(deps, candidates[i]!.target)]++;
        } catch (err) {
          tally.unreachable++;
          deps.log.warn({ target: candidates[i]!.target, err: (err as Error).message }, 'reconciliation lookup failed');
        }
        const left = spacing - (Date.now() - started);
        if (left > 0 && next < candidates.length) await sleep(left);
      }
    }),
  );
  if (candidates.length > 0) deps.log.info({ candidates: candidates.length, ...tally }, 'reconciliation pass');
  return tally;
}

/** Asks the carrier about one resource and stores what it learned as carrier events. */
export async function lookUp(deps: ReconcileDeps, target: LookupTarget): Promise<LookupOutcome> {
  const outcome = await (target.kind === 'leg'
    ? lookUpLeg(deps, target.legId)
    : target.kind === 'caller'
      ? lookUpCaller(deps, target.callId)
      : target.kind === 'message'
        ? lookUpMessage(deps, target.messageId)
        : lookUpRecording(deps, target.callId, target.listedNone));
  deps.metrics?.reconcileLookups.inc({ kind: target.kind, outcome });
  return outcome;
}

async function lookUpLeg(deps: ReconcileDeps, legId: string): Promise<LookupOutcome> {
  const leg = await legById(deps.pool, legId);
  const call = leg ? await callById(deps.pool, leg.call_id) : null;
  if (!leg || !call || leg.ended_at || !leg.carrier_ref) return 'gone';
  const echo: LegState = { c: call.id, l: leg.id, p: leg.position };
  const who: ReconciledLeg = { leg: leg.carrier_ref, echo, from: call.number, to: leg.to_number };
  const found = await voiceOf(deps.carriers, leg.carrier).lookupLeg(leg.carrier_ref);
  if (!found.ok && found.kind === 'retry') return 'unreachable';
  if (!found.ok) {
    // The carrier keeps a call's record only minutes after it ended. Its own
    // hangup, stored and waiting, still says how the leg ended: that decides, not
    // a guess of ours. One that says the leg was connected, with its answer lost
    // for good, makes the answer the carrier's end time: the leg connected, for
    // how long nobody can prove any more, so nothing is billed for it.
    const told = await storedHangup(deps, leg.carrier, leg.carrier_ref);
    if (told) {
      const facts: ReconciledFact[] =
        told.connected === true && !leg.answered_at
          ? [{ kind: 'leg.answered', leg: who, answeredAt: told.endedAt ?? told.occurredAt }]
          : [];
      return store(deps, leg.carrier, facts, () => undefined);
    }
    // Its answer, stored and not applied yet (its worker cut off or killed), says the
    // leg was picked up: concluding "never answered" now would ring on past it. It is
    // asked about again once the answer is applied, as the answered leg it is.
    if (!leg.answered_at && (await answerPending(deps, leg.carrier, leg.carrier_ref))) return 'unchanged';
    // Ended while we were not listening, when exactly nobody can say any more. An
    // unanswered leg ended by the carrier's own rule, its ring timeout; an answered
    // one is billed only up to when the carrier last said it was alive.
    const endedAt = leg.answered_at ? (leg.checked_at ?? leg.answered_at) : ringTimeoutOf(leg, call);
    const connectedSeconds = leg.answered_at
      ? Math.max(0, Math.floor((endedAt.getTime() - leg.answered_at.getTime()) / 1000))
      : 0;
    return store(
      deps,
      leg.carrier,
      [{ kind: 'leg.ended', leg: who, connectedSeconds, startedAt: leg.dialed_at, endedAt }],
      () => undefined,
    );
  }
  const facts: ReconciledFact[] = [];
  if (found.connectedSeconds > 0 && !leg.answered_at) {
    const until = found.endedAt ?? found.observedAt;
    facts.push({
      kind: 'leg.answered',
      leg: who,
      answeredAt: new Date(until.getTime() - found.connectedSeconds * 1000),
    });
  }
  if (!found.alive) {
    facts.push({
      kind: 'leg.ended',
      leg: who,
      connectedSeconds: found.connectedSeconds,
      startedAt: found.startedAt,
      endedAt: found.endedAt ?? found.observedAt,
    });
  }
  return store(deps, leg.carrier, facts, () => legMarkChecked(deps.pool, leg.id, found.observedAt), found.alive);
}

async function lookUpCaller(deps: ReconcileDeps, callId: string): Promise<LookupOutcome> {
  const call = await callById(deps.pool, callId);
  if (!call || call.ended_at || !call.caller_ref) return 'gone';
  const who: ReconciledLeg = { leg: call.caller_ref, echo: null, from: call.from_number, to: call.number };
  const found = await voiceOf(deps.carriers, call.carrier).lookupLeg(call.caller_ref);
  if (!found.ok && found.kind === 'retry') return 'unreachable';
  if (!found.ok) {
    const endedAt = call.caller_checked_at ?? call.answered_at ?? call.created_at;
    return store(
      deps,
      call.carrier,
      [{ kind: 'leg.ended', leg: who, connectedSeconds: 0, startedAt: call.created_at, endedAt }],
      () => undefined,
    );
  }
  if (found.alive) {
    return store(deps, call.carrier, [], () => callMarkCallerChecked(deps.pool, call.id, found.observedAt), true);
  }
  const ended: ReconciledFact = {
    kind: 'leg.ended',
    leg: who,
    connectedSeconds: found.connectedSeconds,
    startedAt: found.startedAt,
    endedAt: found.endedAt ?? found.observedAt,
  };
  return store(deps, call.carrier, [ended], () => undefined);
}

async function lookUpMessage(deps: ReconcileDeps, messageId: string): Promise<LookupOutcome> {
  const m: MessageRow | null = await messageById(deps.pool, messageId);
  if (m?.status !== 'sent' || !m.carrier_message_id) return 'gone';
  const found = await clientOf(deps.carriers, m.carrier).lookupMessage(m.carrier_message_id);
  const now = deps.now?.() ?? new Date();
  if (!found.ok && found.kind === 'retry') return 'unreachable';
  if (!found.ok) return store(deps, m.carrier, [], () => messageMarkChecked(deps.pool, m.id, now));
  const final = found.status === 'delivered' || found.status === 'failed' || found.status === 'unconfirmed';
  const facts: ReconciledFact[] = final
    ? [
        {
          kind: 'message.finalized',
          carrierMessageId: m.carrier_message_id,
          to: m.to_number,
          carrierStatus: found.carrierStatus,
          errorCode: found.errorCode,
          at: found.at,
        },
      ]
    : [];
  return store(deps, m.carrier, facts, () => messageMarkChecked(deps.pool, m.id, found.observedAt));
}

/**
 * A recorded call that ended with no recording (its call.recording.saved late or
 * lost, or the recording never started): the carrier's list of the recorded
 * leg's recordings decides. What it lists is stored as the saved webhook would
 * have carried it; nothing listed long after the end is the recording error.
 */
async function lookUpRecording(deps: ReconcileDeps, callId: string, listedNone?: number): Promise<LookupOutcome> {
  const call = await callById(deps.pool, callId);
  if (!call?.record || call.status !== 'completed' || call.recording_error) return 'gone';
  if ((await recordingsOfCall(deps.pool, call.id)).length > 0) return 'gone';
  if (listedNone === undefined) return 'waiting';
  const who = await recordedLeg(deps, call);
  if (!who) return 'gone';
  const found = await voiceOf(deps.carriers, call.carrier).recordingsOfLeg({
    leg: who.leg,
    to: who.to,
    // A minute's margin for the clocks: the leg's own recordings are picked out by its id anyway.
    since: new Date((call.answered_at ?? call.created_at).getTime() - 60_000),
  });
  if (!found.ok) return 'unreachable';
  if (found.recordings.length > 0) {
    return store(
      deps,
      call.carrier,
      found.recordings.map((r) => ({ kind: 'recording.saved' as const, leg: who, ...r })),
      () => undefined,
    );
  }
  if (listedNone + 1 < RECORDING_MISSING_AFTER) return 'unchanged';
  return store(deps, call.carrier, [{ kind: 'recording.missing', leg: who, at: found.observedAt }], () => undefined);
}

/** The leg recording was started on: an outbound call's answered leg, an inbound call's caller (bridged). */
async function recordedLeg(deps: ReconcileDeps, call: CallRow): Promise<ReconciledLeg | null> {
  if (call.direction === 'inbound') {
    return call.caller_ref ? { leg: call.caller_ref, echo: null, from: call.from_number, to: call.number } : null;
  }
  const leg = call.answered_leg_id ? await legById(deps.pool, call.answered_leg_id) : null;
  if (!leg?.carrier_ref) return null;
  const echo: LegState = { c: call.id, l: leg.id, p: leg.position };
  return { leg: leg.carrier_ref, echo, from: call.number, to: leg.to_number };
}

/** Stores the facts as the carrier's events (each with its processing job), or records that nothing changed. */
async function store(
  deps: ReconcileDeps,
  carrier: string,
  facts: ReconciledFact[],
  checked: () => Promise<void> | undefined,
  alive = false,
): Promise<LookupOutcome> {
  await checked();
  if (facts.length === 0) return alive ? 'alive' : 'unchanged';
  const adapter = carrierNamed(deps.carriers, carrier);
  const events: ReconciledEvent[] = facts.flatMap((f) => adapter.reconciled(f));
  const stored = await carrierEventStoreMany(
    deps.pool,
    events.map((e) => ({
      carrier,
      carrierEventId: e.eventId,
      eventType: e.eventType,
      subject: e.subject,
      rawJson: e.rawJson,
    })),
  );
  const fresh = stored.filter((s) => s.stored).length;
  deps.metrics?.reconciledFacts.inc(fresh);
  if (fresh > 0) deps.log.info({ events: events.map((e) => e.eventId) }, 'reconciliation stored what the carrier told');
  return 'applied';
}

/** The carrier's own hangup of a leg, if one is stored (processed or not). */
async function storedHangup(deps: ReconcileDeps, carrier: string, leg: string) {
  const adapter = carrierNamed(deps.carriers, carrier);
  const payloads = await carrierEventPayloadsAbout(deps.pool, carrier, leg, adapter.eventTypes('call.hangup'));
  for (const p of payloads) {
    try {
      const ev = adapter.parse(p);
      if (ev.kind === 'call.hangup' && ev.source === 'webhook') return ev;
    } catch {
      // a malformed one is recorded by its own processing; it tells us nothing here
    }
  }
  return null;
}

function answerPending(deps: ReconcileDeps, carrier: string, leg: string): Promise<boolean> {
  const types = carrierNamed(deps.carriers, carrier).eventTypes('call.answered');
  return carrierEventPendingAbout(deps.pool, carrier, leg, types);
}

function ringTimeoutOf(leg: LegRow, call: CallRow): Date {
  const start = leg.dialed_at ?? leg.created_at;
  return new Date(start.getTime() + call.ring_plan.timeout * 1000);
}

/**
 * The scheduled pass: runs, then schedules the next one `intervalMs` after this
 * one began (at once if the pass itself took longer), so an alive call is asked
 * about once an interval while the pace allows it.
 */
export function reconcileTask(deps: ReconcileDeps): TaskHandler<'reconcile'> {
  return async () => {
    const started = deps.now?.() ?? new Date();
    try {
      await reconcilePass(deps);
    } catch (err) {
      // The next pass tries again; a failing pass must not also be retried as a job (two passes then).
      deps.log.warn({ err: (err as Error).message }, 'reconciliation pass failed');
    }
    const now = deps.now?.() ?? new Date();
    await withTx(deps.pool, async (tx) => {
      // The bounds this pass ran with were in force until now: what `handset audit` judges by.
      await boundsRecord(tx, deps, now);
      await scheduleReconcile(tx, Math.max(0, started.getTime() + deps.intervalMs - now.getTime()), now);
    });
  };
}

/** Makes sure a pass is scheduled: once per deployment however many workers start (job key). */
export function scheduleReconcile(
  tx: Parameters<typeof enqueue>[0],
  inMs: number,
  now: Date,
  mode: 'replace' | 'preserve_run_at' = 'replace',
) {
  return enqueue(
    tx,
    'reconcile',
    {},
    { runAt: new Date(now.getTime() + inMs), jobKey: jobKeys.reconcile, jobKeyMode: mode },
  );
}

/** One lookup a handler asked for (requests.ts). An unreachable carrier is asked again by whoever still waits. */
export function lookupTask(deps: ReconcileDeps): TaskHandler<'reconcile.lookup'> {
  return async ({ target }) => {
    const outcome = await lookUp(deps, target);
    if (outcome === 'unreachable') deps.log.warn({ target }, 'the carrier did not answer a lookup');
    // A recording is asked about again, a bound later, until it is saved or known
    // missing (no scheduled pass looks for it); an unanswered lookup counts for nothing.
    if (
      target.kind === 'recording' &&
      (outcome === 'waiting' || outcome === 'unchanged' || outcome === 'unreachable')
    ) {
      const listedNone = (target.listedNone ?? -1) + (outcome === 'unreachable' ? 0 : 1);
      const runAt = new Date((deps.now?.() ?? new Date()).getTime() + deps.afterMs);
      await withTx(deps.pool, (tx) => requestLookup(tx, { ...target, listedNone }, runAt));
    }
  };
}
