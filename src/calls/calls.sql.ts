// SQL for calls, call_legs and carrier_leg_endings. Each transition is one guarded
// statement that returns the row it changed, or nothing when it was refused:
//
//   call:  ringing ──answer (status='ringing')──▶ in_progress ──hangup (ended_at IS NULL)──▶ completed
//             └──────────── hangup / plan exhausted (ended_at IS NULL) ───────────────────▶ missed
//   ring cursor: next = p+1 ──CAS (next = p+1 AND status='ringing')──▶ p+2, only the winner dials p+1
//   leg:   dialing ──stamp──▶ ringing ──answer──▶ answered ──hangup (ended_at IS NULL)──▶ completed
//             │                  └───────────────── hangup ───────────────────────────▶ no_answer
//             └──cancel (call over)──▶ canceled        dial refused ──▶ failed
//
// A leg's `carrier_ref` is its carrier's reference for it (what commands address);
// an inbound call's `caller_ref` is the caller's. Reads named `…OfAccount` take the
// account and find only its rows; the others are for jobs, which act on any row.

import type { Db } from '../db/pool.js';
import type { Tx } from '../db/tx.js';

export const CALL_STATUSES = ['ringing', 'in_progress', 'completed', 'missed'] as const;
export type CallStatus = (typeof CALL_STATUSES)[number];
export const LEG_STATUSES = ['dialing', 'ringing', 'answered', 'completed', 'no_answer', 'canceled', 'failed'] as const;
export type LegStatus = (typeof LEG_STATUSES)[number];
export const CALL_DIRECTIONS = ['outbound', 'inbound'] as const;
export type CallDirection = (typeof CALL_DIRECTIONS)[number];
/** The facts of a leg that can come from a lookup rather than a webhook. */
export const LEG_FACTS = ['answered', 'hangup'] as const;
export type LegFact = (typeof LEG_FACTS)[number];

export interface RingPlan {
  targets: string[];
  timeout: number;
  next: number;
}

export interface CallRow {
  id: string;
  account_id: string;
  tenant_id: string | null;
  direction: CallDirection;
  from_number: string;
  number: string;
  status: CallStatus;
  ring_plan: RingPlan;
  carrier: string;
  caller_ref: string | null;
  /** When the carrier was last asked whether the inbound caller is still there (reconciliation). */
  caller_checked_at: Date | null;
  /** The caller's hangup was learned from a lookup, not a webhook. */
  caller_reconciled: boolean;
  answered_leg_id: string | null;
  answered_at: Date | null;
  ended_at: Date | null;
  duration_seconds: number | null;
  created_at: Date;
  /** Grows by one with each transition of the call row (guarded statements below); customers order events by it. */
  sequence: number;
  /** Record the answered call; transcribe its recording once it ended (transcribe implies record). */
  record: boolean;
  transcribe: boolean;
  /** Why the carrier could not record it, when it could not. */
  recording_error: string | null;
}
const CALL_COLUMNS = `id, account_id, tenant_id, direction, from_number, number, status, ring_plan, carrier,
  caller_ref, caller_checked_at, caller_reconciled, answered_leg_id, answered_at, ended_at, duration_seconds, created_at, sequence,
  record, transcribe, recording_error`;

export interface LegRow {
  id: string;
  call_id: string;
  carrier: string;
  position: number;
  to_number: string;
  status: LegStatus;
  carrier_ref: string | null;
  hangup_cause: string | null;
  dialed_at: Date | null;
  answered_at: Date | null;
  ended_at: Date | null;
  /** When the carrier was last asked about the leg (reconciliation). */
  checked_at: Date | null;
  /** Which of the leg's facts came from a lookup rather than a webhook. */
  reconciled: LegFact[];
  created_at: Date;
}
const LEG_COLUMNS = `id, call_id, carrier, position, to_number, status, carrier_ref, hangup_cause, dialed_at,
  answered_at, ended_at, checked_at, reconciled, created_at`;
const LEG_COLUMNS_OF_L = LEG_COLUMNS.split(',')
  .map((c) => `l.${c.trim()}`)
  .join(', ');

/** The column lists the rows above are typed from, held to the tables by a test. */
export const CALL_TABLE_COLUMNS = { calls: CALL_COLUMNS, call_legs: LEG_COLUMNS };

/**
 * A new call, ringing at sequence 1; everything after (even an end in the same
 * transaction) is a guarded transition of its own. An inbound call is one per
 * caller leg at its carrier: null when that leg is a call already.
 */
export async function callInsert(
  tx: Tx,
  c: {
    accountId: string;
    tenantId: string | null;
    direction: CallDirection;
    from: string;
    number: string;
    plan: RingPlan;
    carrier: string;
    callerRef?: string | null;
    createdAt?: Date;
    record?: boolean;
    transcribe?: boolean;
  },
): Promise<CallRow | null> {
  const { rows } = await tx.query<CallRow>({
    name: 'call_insert',
    text: `INSERT INTO calls (account_id, tenant_id, direction, from_number, number, status, ring_plan, carrier,
                              caller_ref, created_at, record, transcribe)
           VALUES ($1, $2, $3, $4, $5, 'ringing', $6::jsonb, $7, $8, coalesce($9, now()), $10 OR $11, $11)
           ON CONFLICT (carrier, caller_ref) DO NOTHING
           RETURNING ${CALL_COLUMNS}`,
    values: [
      c.accountId,
      c.tenantId,
      c.direction,
      c.from,
      c.number,
      JSON.stringify(c.plan),
      c.carrier,
      c.callerRef ?? null,
      c.createdAt ?? null,
      c.record ?? false,
      c.transcribe ?? false,
    ],
  });
  return rows[0] ?? null;
}

/**
 * The carrier could not record the call: noted once (a repeated error changes
 * nothing), and never on a call whose recording was saved (the carrier's recording
 * is its word; an "already ended" to a re-sent command is not).
 */
export async function callRecordingFailed(tx: Tx, id: string, reason: string): Promise<CallRow | null> {
  const { rows } = await tx.query<CallRow>({
    name: 'call_recording_failed',
    text: `UPDATE calls SET recording_error = $2, sequence = sequence + 1
            WHERE id = $1 AND record AND recording_error IS NULL
              AND NOT EXISTS (SELECT 1 FROM recordings r WHERE r.call_id = calls.id)
            RETURNING ${CALL_COLUMNS}`,
    values: [id, reason],
  });
  return rows[0] ?? null;
}

/** Serializes every transition of one call: all call handlers take this lock first (no deadlocks). */
export async function callLock(tx: Tx, id: string): Promise<CallRow | null> {
  const { rows } = await tx.query<CallRow>({
    name: 'call_lock',
    text: `SELECT ${CALL_COLUMNS} FROM calls WHERE id = $1 FOR UPDATE`,
    values: [id],
  });
  return rows[0] ?? null;
}

/** How many of the account's calls on this number of this carrier are still ringing or talking. */
export async function callsLiveOnNumber(db: Db, accountId: string, carrier: string, number: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>({
    name: 'calls_live_on_number',
    text: `SELECT count(*)::int AS n FROM calls
            WHERE account_id = $1 AND carrier = $2 AND number = $3 AND status IN ('ringing', 'in_progress')`,
    values: [accountId, carrier, number],
  });
  return rows[0]!.n;
}

export async function callOfAccount(db: Db, accountId: string, id: string): Promise<CallRow | null> {
  const { rows } = await db.query<CallRow>({
    name: 'call_of_account',
    text: `SELECT ${CALL_COLUMNS} FROM calls WHERE id = $1 AND account_id = $2`,
    values: [id, accountId],
  });
  return rows[0] ?? null;
}

/** For jobs, which act on a call whoever owns it. */
export async function callById(db: Db, id: string): Promise<CallRow | null> {
  const { rows } = await db.query<CallRow>({
    name: 'call_by_id',
    text: `SELECT ${CALL_COLUMNS} FROM calls WHERE id = $1`,
    values: [id],
  });
  return rows[0] ?? null;
}

export async function callByCallerRef(db: Db, carrier: string, callerRef: string): Promise<CallRow | null> {
  const { rows } = await db.query<CallRow>({
    name: 'call_by_caller_ref',
    text: `SELECT ${CALL_COLUMNS} FROM calls WHERE carrier = $1 AND caller_ref = $2`,
    values: [carrier, callerRef],
  });
  return rows[0] ?? null;
}

export async function callList(
  db: Db,
  accountId: string,
  filter: { status?: string | undefined; direction?: string | undefined },
  limit: number,
  startingAfter: string | null,
): Promise<CallRow[]> {
  const { rows } = await db.query<CallRow>({
    name: 'call_list',
    text: `SELECT ${CALL_COLUMNS} FROM calls
            WHERE account_id = $1 AND ($2::text IS NULL OR status = $2) AND ($3::text IS NULL OR direction = $3)
              AND ($4::text IS NULL OR id < $4)
            ORDER BY id DESC LIMIT $5`,
    values: [accountId, filter.status ?? null, filter.direction ?? null, startingAfter, limit + 1],
  });
  return rows;
}

/**
 * The ring cursor's compare-and-swap: "I believe the next target is `expected`,
 * and I claim it by setting next to expected+1." Refused when another worker
 * (a duplicate hangup) took this turn, or when the call is no longer ringing.
 */
export async function callClaimNext(tx: Tx, id: string, expected: number): Promise<CallRow | null> {
  const { rows } = await tx.query<CallRow>({
    name: 'call_claim_next',
    text: `UPDATE calls SET ring_plan = jsonb_set(ring_plan, '{next}', to_jsonb($3::int)), sequence = sequence + 1
            WHERE id = $1 AND (ring_plan->>'next')::int = $2 AND status = 'ringing'
            RETURNING ${CALL_COLUMNS}`,
    values: [id, expected, expected + 1],
  });
  return rows[0] ?? null;
}

/** ringing → in_progress, once: the first answer wins. */
export async function callAnswer(tx: Tx, id: string, legId: string, at: Date): Promise<CallRow | null> {
  const { rows } = await tx.query<CallRow>({
    name: 'call_answer',
    text: `UPDATE calls SET status = 'in_progress', answered_at = $3, answered_leg_id = $2, sequence = sequence + 1
            WHERE id = $1 AND status = 'ringing'
            RETURNING ${CALL_COLUMNS}`,
    values: [id, legId, at],
  });
  return rows[0] ?? null;
}

/**
 * The design's hangup guard: ringing → missed, in_progress → completed, with the
 * duration, once. A second hangup finds ended_at set and nothing to end or bill.
 * `ringCursor`, when given, also requires the plan to be exhausted at that
 * position (the last target's hangup), so a stale leg cannot end a call that
 * has moved on.
 */
export async function callEnd(
  tx: Tx,
  id: string,
  at: Date,
  opts: { ringCursor?: number; callerReconciled?: boolean } = {},
): Promise<CallRow | null> {
  const { rows } = await tx.query<CallRow>({
    name: 'call_end',
    text: `UPDATE calls SET
              status = CASE status WHEN 'ringing' THEN 'missed' WHEN 'in_progress' THEN 'completed' ELSE status END,
              duration_seconds = CASE WHEN status = 'in_progress'
                                      THEN greatest(0, ceil(extract(epoch FROM ($2::timestamptz - answered_at))))::int
                                      ELSE 0 END,
              ended_at = $2,
              caller_reconciled = caller_reconciled OR $4,
              sequence = sequence + 1
            WHERE id = $1 AND ended_at IS NULL
              AND ($3::int IS NULL OR (status = 'ringing' AND (ring_plan->>'next')::int = $3))
            RETURNING ${CALL_COLUMNS}`,
    values: [id, at, opts.ringCursor ?? null, opts.callerReconciled ?? false],
  });
  return rows[0] ?? null;
}

export async function legInsert(tx: Tx, call: CallRow, position: number, to: string): Promise<LegRow> {
  const { rows } = await tx.query<LegRow>({
    name: 'leg_insert',
    text: `INSERT INTO call_legs (call_id, carrier, position, to_number, status) VALUES ($1, $2, $3, $4, 'dialing')
           RETURNING ${LEG_COLUMNS}`,
    values: [call.id, call.carrier, position, to],
  });
  return rows[0]!;
}

export async function legById(db: Db, id: string): Promise<LegRow | null> {
  const { rows } = await db.query<LegRow>({
    name: 'leg_by_id',
    text: `SELECT ${LEG_COLUMNS} FROM call_legs WHERE id = $1`,
    values: [id],
  });
  return rows[0] ?? null;
}

export async function legByCarrierRef(db: Db, carrier: string, carrierRef: string): Promise<LegRow | null> {
  const { rows } = await db.query<LegRow>({
    name: 'leg_by_carrier_ref',
    text: `SELECT ${LEG_COLUMNS} FROM call_legs WHERE carrier = $1 AND carrier_ref = $2`,
    values: [carrier, carrierRef],
  });
  return rows[0] ?? null;
}

export async function legsOf(db: Db, callId: string): Promise<LegRow[]> {
  const { rows } = await db.query<LegRow>({
    name: 'legs_of',
    text: `SELECT ${LEG_COLUMNS} FROM call_legs WHERE call_id = $1 ORDER BY position`,
    values: [callId],
  });
  return rows;
}

/** Records the carrier's reference for a dialed leg; the first of the dial answer and call.initiated wins. */
export async function legStamp(tx: Tx, id: string, carrierRef: string, at: Date): Promise<LegRow | null> {
  const { rows } = await tx.query<LegRow>({
    name: 'leg_stamp',
    text: `UPDATE call_legs SET carrier_ref = $2, dialed_at = $3,
                  status = CASE WHEN status = 'dialing' THEN 'ringing' ELSE status END
            WHERE id = $1 AND carrier_ref IS NULL
            RETURNING ${LEG_COLUMNS}`,
    values: [id, carrierRef, at],
  });
  return rows[0] ?? null;
}

/** A leg that was claimed but whose dial never went out (the call was over, or the dial was refused). */
export async function legAbandon(
  tx: Tx,
  id: string,
  status: 'canceled' | 'failed',
  cause: string,
  at: Date,
): Promise<LegRow | null> {
  const { rows } = await tx.query<LegRow>({
    name: 'leg_abandon',
    text: `UPDATE call_legs SET status = $2, hangup_cause = $3, ended_at = $4
            WHERE id = $1 AND status = 'dialing' AND ended_at IS NULL
            RETURNING ${LEG_COLUMNS}`,
    values: [id, status, cause, at],
  });
  return rows[0] ?? null;
}

export async function legAnswer(tx: Tx, id: string, at: Date, reconciled = false): Promise<LegRow | null> {
  const { rows } = await tx.query<LegRow>({
    name: 'leg_answer',
    text: `UPDATE call_legs SET status = 'answered', answered_at = $2,
                  reconciled = CASE WHEN $3 THEN array_append(reconciled, 'answered') ELSE reconciled END
            WHERE id = $1 AND status IN ('dialing', 'ringing') AND ended_at IS NULL
            RETURNING ${LEG_COLUMNS}`,
    values: [id, at, reconciled],
  });
  return rows[0] ?? null;
}

/** The leg's hangup guard: a second hangup finds ended_at set. */
export async function legEnd(tx: Tx, id: string, cause: string, at: Date, reconciled = false): Promise<LegRow | null> {
  const { rows } = await tx.query<LegRow>({
    name: 'leg_end',
    text: `UPDATE call_legs SET ended_at = $3, hangup_cause = $2,
                  status = CASE WHEN answered_at IS NOT NULL THEN 'completed' ELSE 'no_answer' END,
                  reconciled = CASE WHEN $4 THEN array_append(reconciled, 'hangup') ELSE reconciled END
            WHERE id = $1 AND ended_at IS NULL
            RETURNING ${LEG_COLUMNS}`,
    values: [id, cause, at, reconciled],
  });
  return rows[0] ?? null;
}

/**
 * A carrier leg that hung up before any call of ours named it (an inbound caller
 * whose call.initiated is late): kept so that the call, when it comes, is created
 * missed. The first ending wins.
 */
export async function legEndingRecord(
  tx: Tx,
  carrier: string,
  carrierRef: string,
  at: Date,
  cause: string,
): Promise<boolean> {
  const { rowCount } = await tx.query({
    name: 'leg_ending_record',
    text: `INSERT INTO carrier_leg_endings (carrier, carrier_ref, ended_at, hangup_cause) VALUES ($1, $2, $3, $4)
           ON CONFLICT (carrier, carrier_ref) DO NOTHING`,
    values: [carrier, carrierRef, at, cause],
  });
  return rowCount === 1;
}

export async function legEndingFind(
  db: Db,
  carrier: string,
  carrierRef: string,
): Promise<{ ended_at: Date; hangup_cause: string } | null> {
  const { rows } = await db.query<{ ended_at: Date; hangup_cause: string }>({
    name: 'leg_ending_find',
    text: 'SELECT ended_at, hangup_cause FROM carrier_leg_endings WHERE carrier = $1 AND carrier_ref = $2',
    values: [carrier, carrierRef],
  });
  return rows[0] ?? null;
}

/** Endings older than `before` whose call never came: kept no longer than the raw events they answer. */
export async function legEndingsExpire(db: Db, before: Date): Promise<number> {
  const { rowCount } = await db.query({
    name: 'leg_endings_expire',
    text: 'DELETE FROM carrier_leg_endings WHERE created_at < $1',
    values: [before],
  });
  return rowCount ?? 0;
}

/** A leg waiting for a carrier event, with what a lookup needs to know about its call. */
export interface WaitingLeg extends LegRow {
  from_number: string;
  ring_timeout_secs: number;
}

/**
 * Legs the carrier should be asked about: still up in our books, past their
 * expected moment by `afterMs` (a ringing leg: its ring timeout; an answered
 * one: its answer), and not asked within `gapMs` (a leg the carrier says is
 * alive is asked again). Least recently asked first.
 */
export async function legsAwaitingCarrier(
  db: Db,
  now: Date,
  afterMs: number,
  gapMs: number,
  limit: number,
): Promise<WaitingLeg[]> {
  const { rows } = await db.query<WaitingLeg>({
    name: 'legs_awaiting_carrier',
    text: `SELECT ${LEG_COLUMNS_OF_L}, c.number AS from_number, (c.ring_plan->>'timeout')::int AS ring_timeout_secs
             FROM call_legs l JOIN calls c ON c.id = l.call_id
            WHERE l.ended_at IS NULL AND l.carrier_ref IS NOT NULL
              AND (l.checked_at IS NULL OR l.checked_at <= $1::timestamptz - make_interval(secs => $3::float8 / 1000))
              AND CASE WHEN l.answered_at IS NULL
                       THEN l.dialed_at + make_interval(secs => (c.ring_plan->>'timeout')::int + $2::float8 / 1000) < $1
                       ELSE l.answered_at + make_interval(secs => $2::float8 / 1000) < $1 END
            ORDER BY l.checked_at NULLS FIRST, l.id LIMIT $4`,
    values: [now, afterMs, gapMs, limit],
  });
  return rows;
}

/** Inbound calls whose caller the carrier should be asked about (parked or bridged, past `afterMs`). */
export async function callersAwaitingCarrier(
  db: Db,
  now: Date,
  afterMs: number,
  gapMs: number,
  limit: number,
): Promise<CallRow[]> {
  const { rows } = await db.query<CallRow>({
    name: 'callers_awaiting_carrier',
    text: `SELECT ${CALL_COLUMNS} FROM calls
            WHERE ended_at IS NULL AND caller_ref IS NOT NULL
              AND (caller_checked_at IS NULL OR caller_checked_at <= $1::timestamptz - make_interval(secs => $3::float8 / 1000))
              AND created_at + make_interval(secs => $2::float8 / 1000) < $1
            ORDER BY caller_checked_at NULLS FIRST, id LIMIT $4`,
    values: [now, afterMs, gapMs, limit],
  });
  return rows;
}

/** Records that the carrier was asked about the leg (bookkeeping for reconciliation, not the leg's state). */
export async function legMarkChecked(db: Db, id: string, at: Date): Promise<void> {
  await db.query({
    name: 'leg_mark_checked',
    text: 'UPDATE call_legs SET checked_at = $2 WHERE id = $1 AND ended_at IS NULL',
    values: [id, at],
  });
}

export async function callMarkCallerChecked(db: Db, id: string, at: Date): Promise<void> {
  await db.query({
    name: 'call_mark_caller_checked',
    text: 'UPDATE calls SET caller_checked_at = $2 WHERE id = $1 AND ended_at IS NULL',
    values: [id, at],
  });
}
