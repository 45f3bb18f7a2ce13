// SQL for webhook_deliveries (one per event and subscribed endpoint) and
// webhook_attempts (one per HTTP attempt). A delivery is pending until it ends
// succeeded, failed (after its retries) or skipped (endpoint disabled); each of
// those moves is guarded on status = 'pending'.

import type { Db } from '../db/pool.js';
import type { Tx } from '../db/tx.js';
import {
  ABOUT_ENDPOINT_EVENT_TYPES,
  type EventType,
  type OutboundEventRow,
  TEST_EVENT_TYPE,
} from '../outbox/outbox.sql.js';
import type { EndpointRow } from './endpoints.sql.js';

export const DELIVERY_STATUSES = ['pending', 'succeeded', 'failed', 'skipped'] as const;
export type DeliveryStatus = (typeof DELIVERY_STATUSES)[number];
/** What started an attempt: the schedule (first try and retries), a customer's redeliver, or a recovery. */
export const ATTEMPT_TRIGGERS = ['scheduled', 'redeliver', 'recover'] as const;
export type AttemptTrigger = (typeof ATTEMPT_TRIGGERS)[number];

export interface DeliveryRow {
  id: string;
  event_id: string;
  endpoint_id: string;
  status: DeliveryStatus;
  attempts: number;
  next_attempt_at: Date | null;
  /** When the relay may take its first attempt (its lease's end once claimed); null: a job or nothing moves it on. */
  relay_after: Date | null;
  created_at: Date;
  updated_at: Date;
}

const DELIVERY_COLUMNS =
  'id, event_id, endpoint_id, status, attempts, next_attempt_at, relay_after, created_at, updated_at';

export interface AttemptRow {
  id: string;
  delivery_id: string;
  attempt: number;
  trigger: AttemptTrigger;
  url: string;
  started_at: Date;
  duration_ms: number;
  response_status: number | null;
  response_excerpt: string | null;
  error: string | null;
}
const ATTEMPT_COLUMNS =
  'id, delivery_id, attempt, trigger, url, started_at, duration_ms, response_status, response_excerpt, error';
const ATTEMPT_COLUMNS_OF_A = ATTEMPT_COLUMNS.split(', ')
  .map((c) => `a.${c}`)
  .join(', ');

/** The column lists the rows above are typed from, held to the tables by a test. */
export const DELIVERY_TABLE_COLUMNS = { webhook_deliveries: DELIVERY_COLUMNS, webhook_attempts: ATTEMPT_COLUMNS };

/** A delivery about to be scheduled: its endpoint, and whether that endpoint is failing now. */
export interface DeliveryToSchedule {
  id: string;
  endpoint_id: string;
  status: DeliveryStatus;
  endpoint_failing: boolean;
  /** The relay takes its first attempt (delivery/relay.ts): no job is queued for it. */
  relayed: boolean;
}

/** A delivery the fan-out made, with its work (but the event) when it is handed to a relay (deliveriesFanOut). */
export interface FannedOut extends DeliveryToSchedule {
  work: Omit<DeliveryWork, 'event'> | null;
}

/** What the fan-out needs of its event: it runs beside the event's insert, not after it (outbox.ts). */
export type EventToFanOut = Pick<OutboundEventRow, 'id' | 'account_id' | 'type' | 'subject_id'>;

/** NOTIFYed by a transaction that gave the relay a delivery: its loops wake and claim. */
export const DELIVERY_CHANNEL = 'handset_deliveries';

/**
 * One delivery of the event per endpoint of its account, not deleted and
 * subscribed to its type (none subscribed: every type), at this moment: pending,
 * or skipped when the endpoint is disabled right now. An operational event about
 * an endpoint never goes to that endpoint; a test event goes to it alone.
 * A healthy endpoint's delivery is due to the relays now, and they are woken;
 * or, with `leaseUntil`, leased until then to the relay it is handed to
 * (handoff.ts), with what its attempt needs, and nobody is woken for it.
 */
export async function deliveriesFanOut(
  tx: Tx,
  event: EventToFanOut,
  leaseUntil: Date | null = null,
): Promise<FannedOut[]> {
  const { rows } = await tx.query<DeliveryToSchedule & Partial<Pick<WorkRow, 'd' | 'e' | 'secrets'>>>({
    name: 'deliveries_fan_out',
    text: `WITH dl AS (
             INSERT INTO webhook_deliveries (event_id, endpoint_id, status, relay_after)
             SELECT $1, e.id, CASE WHEN e.enabled THEN 'pending' ELSE 'skipped' END,
                    -- a failing endpoint's deliveries queue in its lane instead (schedule.ts)
                    CASE WHEN e.enabled AND e.consecutive_failures = 0 AND NOT e.timing_out
                         THEN coalesce($8::timestamptz, now()) END
               FROM webhook_endpoints e
              WHERE e.account_id = $2 AND e.deleted_at IS NULL
                AND CASE WHEN $3 = $6 THEN e.id = $4
                         ELSE (cardinality(e.event_types) = 0 OR $3 = ANY (e.event_types))
                              AND NOT ($3 = ANY ($5::text[]) AND e.id = $4) END
             RETURNING *
           ), woke AS (
             -- one wake-up per transaction, however many events it emits (PostgreSQL folds repeats)
             SELECT pg_notify($7, '') FROM dl WHERE dl.relay_after IS NOT NULL AND $8::timestamptz IS NULL LIMIT 1
           )
           SELECT dl.id, dl.endpoint_id, dl.status, e.consecutive_failures > 0 AS endpoint_failing,
                  dl.relay_after IS NOT NULL AS relayed,
                  -- a handed delivery's work, so its relay attempts it without loading it
                  CASE WHEN $8::timestamptz IS NOT NULL AND dl.relay_after IS NOT NULL THEN row_to_json(dl.*) END AS d,
                  CASE WHEN $8::timestamptz IS NOT NULL AND dl.relay_after IS NOT NULL THEN row_to_json(e.*) END AS e,
                  CASE WHEN $8::timestamptz IS NOT NULL AND dl.relay_after IS NOT NULL THEN ${SECRETS_OF_E} END AS secrets
             FROM dl JOIN webhook_endpoints e ON e.id = dl.endpoint_id
            WHERE (SELECT count(*) FROM woke) >= 0
            ORDER BY dl.id`,
    values: [
      event.id,
      event.account_id,
      event.type,
      event.subject_id,
      ABOUT_ENDPOINT_EVENT_TYPES,
      TEST_EVENT_TYPE,
      DELIVERY_CHANNEL,
      leaseUntil,
    ],
  });
  return rows.map(({ d, e, secrets, ...row }) => ({
    ...row,
    work: d && e ? { delivery: deliveryOf(d), endpoint: endpointOf(e), sealedSecrets: secrets ?? [] } : null,
  }));
}

export interface DeliveryWork {
  delivery: DeliveryRow;
  endpoint: EndpointRow;
  event: OutboundEventRow;
  /** The endpoint's signing secrets now, sealed, newest first (secrets.sql.ts). */
  sealedSecrets: string[];
}

/** What one attempt needs, as columns of the row `d` of webhook_deliveries (the load's and the claim's). */
/** The endpoint `e`'s secrets in force, newest first. */
const SECRETS_OF_E = `(SELECT array_agg(s.sealed ORDER BY s.created_at DESC, s.id DESC) FROM webhook_endpoint_secrets s
                        WHERE s.endpoint_id = e.id AND (s.expires_at IS NULL OR s.expires_at > now()))`;
const WORK_COLUMNS = `row_to_json(d.*) AS d, row_to_json(e.*) AS e, row_to_json(ev.*) AS ev, ${SECRETS_OF_E} AS secrets`;
const WORK_JOINS = `JOIN webhook_endpoints e ON e.id = d.endpoint_id
             JOIN outbound_events ev ON ev.id = d.event_id`;
type WorkRow = { d: DeliveryRow; e: EndpointRow; ev: OutboundEventRow; secrets: string[] | null };

/** Everything one attempt needs, in one round trip. */
export async function deliveryLoad(db: Db, id: string): Promise<DeliveryWork | null> {
  const { rows } = await db.query<WorkRow>({
    name: 'delivery_load',
    text: `SELECT ${WORK_COLUMNS}
             FROM webhook_deliveries d
             ${WORK_JOINS}
            WHERE d.id = $1`,
    values: [id],
  });
  const row = rows[0];
  return row ? workOf(row) : null;
}

/** A row as row_to_json gave it, with the timestamps it leaves as strings (`keys`) made dates again. */
function dated<T extends object>(row: T, keys: readonly (keyof T)[]): T {
  const out = { ...row };
  for (const k of keys) if (out[k] !== null) out[k] = new Date(out[k] as string) as T[keyof T];
  return out;
}

const deliveryOf = (d: DeliveryRow) => dated(d, ['next_attempt_at', 'relay_after', 'created_at', 'updated_at']);
const endpointOf = (e: EndpointRow) => dated(e, ['disabled_at', 'deleted_at', 'created_at', 'updated_at']);

function workOf(row: WorkRow): DeliveryWork {
  return {
    delivery: deliveryOf(row.d),
    endpoint: endpointOf(row.e),
    event: dated(row.ev, ['occurred_at', 'created_at']),
    sealedSecrets: row.secrets ?? [],
  };
}

/**
 * Counts the attempt on its delivery and logs it; returns its number among all
 * attempts and among the scheduled ones (what the retry schedule counts).
 */
export async function attemptRecord(
  tx: Tx,
  a: Omit<AttemptRow, 'id' | 'attempt'>,
): Promise<{ attempt: number; scheduled: number }> {
  const { rows } = await tx.query<{ attempt: number; scheduled: number }>({
    name: 'attempt_record',
    text: `WITH d AS (
             UPDATE webhook_deliveries SET attempts = attempts + 1, updated_at = now()
              WHERE id = $1 RETURNING attempts
           ), ins AS (
             INSERT INTO webhook_attempts (delivery_id, attempt, trigger, url, started_at, duration_ms,
                                           response_status, response_excerpt, error)
             SELECT $1, d.attempts, $2, $3, $4, $5, $6, $7, $8 FROM d
             RETURNING attempt
           )
           -- the statement's snapshot does not see the row it inserts: count it in by hand
           SELECT ins.attempt,
                  (SELECT count(*) FROM webhook_attempts WHERE delivery_id = $1 AND trigger = 'scheduled')::int
                    + CASE WHEN $2 = 'scheduled' THEN 1 ELSE 0 END AS scheduled
             FROM ins`,
    values: [
      a.delivery_id,
      a.trigger,
      a.url,
      a.started_at,
      a.duration_ms,
      a.response_status,
      a.response_excerpt,
      a.error,
    ],
  });
  return rows[0]!;
}

/** A 2xx to record (deliverySucceedMany): the attempt as it will be logged. */
export type SucceededAttempt = Pick<
  AttemptRow,
  'delivery_id' | 'trigger' | 'url' | 'started_at' | 'duration_ms' | 'response_status' | 'response_excerpt'
>;

/**
 * Records successful attempts as ONE statement, so a batch of them is one
 * transaction and one commit. Each delivery's row is locked first, by primary
 * key, in id order; then each still pending moves to succeeded (the guarded
 * transition), and each that left pending meanwhile (skipped by its endpoint's
 * disabling) is only counted. Every attempt is logged, numbered after its
 * delivery's earlier ones. The guard reads the locked row, not the table: a
 * `status = 'pending'` on the table itself lets the planner walk the partial
 * index of every pending delivery on young statistics (2,010 rows read for 10).
 * Answers, in input order, whether each delivery was finished by it.
 */
export async function deliverySucceedMany(db: Db, attempts: readonly SucceededAttempt[]): Promise<boolean[]> {
  const { rows } = await db.query<{ id: string }>({
    // Unnamed, so planned at every run for its own ids and the table as it is now.
    // A named statement's connection keeps a generic plan after a few runs, and one
    // made while the table was small scans it whole once it has grown (measured
    // under the pipeline bench: 1.1-2.0 ms a batch, about 250-450 pages read;
    // unnamed, 0.36 ms and 54 pages).
    text: `WITH locked AS (
             SELECT d.id, d.status FROM webhook_deliveries d WHERE d.id = ANY ($1::text[]) ORDER BY d.id FOR UPDATE
           ), moved AS (
             -- one UPDATE for both kinds: half the planning of one for each (0.28 ms, not 0.52)
             UPDATE webhook_deliveries d
                SET status = CASE WHEN l.status = 'pending' THEN 'succeeded' ELSE d.status END,
                    next_attempt_at = CASE WHEN l.status = 'pending' THEN NULL ELSE d.next_attempt_at END,
                    relay_after = CASE WHEN l.status = 'pending' THEN NULL ELSE d.relay_after END,
                    attempts = d.attempts + 1, updated_at = now()
               FROM locked l
              WHERE d.id = ANY ($1::text[]) AND d.id = l.id
             RETURNING d.id, d.attempts, l.status = 'pending' AS finished
           ), logged AS (
             INSERT INTO webhook_attempts (delivery_id, attempt, trigger, url, started_at, duration_ms,
                                           response_status, response_excerpt, error)
             SELECT i.delivery_id, m.attempts, i.trigger, i.url, i.started_at, i.duration_ms,
                    i.response_status, i.response_excerpt, NULL
               FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::int[], $6::int[], $7::text[])
                      AS i (delivery_id, trigger, url, started_at, duration_ms, response_status, response_excerpt)
               JOIN moved m ON m.id = i.delivery_id
           )
           SELECT id FROM moved WHERE finished`,
    values: [
      attempts.map((a) => a.delivery_id),
      attempts.map((a) => a.trigger),
      attempts.map((a) => a.url),
      attempts.map((a) => a.started_at),
      attempts.map((a) => a.duration_ms),
      attempts.map((a) => a.response_status),
      attempts.map((a) => a.response_excerpt),
    ],
  });
  const finished = new Set(rows.map((r) => r.id));
  return attempts.map((a) => finished.has(a.delivery_id));
}

// The one-delivery transitions below find their row by primary key alone, lock it
// (FOR NO KEY UPDATE, the lock an UPDATE takes) and read the guard from the locked
// row, its latest version, and are unnamed, planned at each run. A
// `status = 'pending'` on the table let the planner walk the partial index of every
// pending delivery, all accounts' backlogs, for each one on statistics from before
// a backlog (2,000 rows read for one); a plan a connection kept from when the table
// was small scans it whole.
const LOCKED_DELIVERY = `target AS (
             SELECT id AS target_id, status AS target_status, endpoint_id AS target_endpoint
               FROM webhook_deliveries WHERE id = $1 FOR NO KEY UPDATE
           )`;

/** pending → succeeded | failed | skipped; false when it had already left pending. */
export async function deliveryFinish(tx: Tx, id: string, status: Exclude<DeliveryStatus, 'pending'>): Promise<boolean> {
  const { rowCount } = await tx.query({
    text: `WITH ${LOCKED_DELIVERY}
           UPDATE webhook_deliveries SET status = $2, next_attempt_at = NULL, relay_after = NULL, updated_at = now()
             FROM target WHERE id = target_id AND target_status = 'pending'`,
    values: [id, status],
  });
  return rowCount === 1;
}

/**
 * pending → skipped because its endpoint is disabled or deleted, checked in the
 * statement itself. Lock the endpoint first: a re-enable committing meanwhile is
 * then seen, and the delivery is not skipped.
 */
export async function deliverySkipForEndpoint(tx: Tx, id: string): Promise<boolean> {
  const { rowCount } = await tx.query({
    text: `WITH ${LOCKED_DELIVERY}
           UPDATE webhook_deliveries d
              SET status = 'skipped', next_attempt_at = NULL, relay_after = NULL, updated_at = now()
             FROM target, webhook_endpoints e
            WHERE d.id = target_id AND target_status = 'pending' AND e.id = target_endpoint
              AND (NOT e.enabled OR e.deleted_at IS NOT NULL)`,
    values: [id],
  });
  return rowCount === 1;
}

/** The retry's time, on the delivery whose retry job is queued in the same transaction (the relay lets go of it). */
export async function deliveryScheduleRetry(tx: Tx, id: string, at: Date): Promise<boolean> {
  const { rowCount } = await tx.query({
    text: `WITH ${LOCKED_DELIVERY}
           UPDATE webhook_deliveries SET next_attempt_at = $2, relay_after = NULL, updated_at = now()
             FROM target WHERE id = target_id AND target_status = 'pending'`,
    values: [id, at],
  });
  return rowCount === 1;
}

/** What a relay's claim may take: how many rows, and how many of each endpoint and account with attempts in flight. */
export interface ClaimRoom {
  limit: number;
  endpoints: string[];
  endpointRooms: number[];
  accounts: string[];
  accountRooms: number[];
  /** The room of any other endpoint, and of any other account. */
  perEndpoint: number;
  perAccount: number;
}

/** Due rows a claim looks through per row it may take: enough to pass over a few endpoints' rows beyond their room. */
const CLAIM_WINDOW_PER_ROW = 4;

/**
 * Takes the deliveries the relay may attempt now, oldest due first and no more of
 * an endpoint or an account than its room, and leases each until `leaseUntil`
 * (the crash-recovery bound, renewed while the attempt runs): other loops and
 * processes skip the locked rows and, once this commits, the leased ones. Each
 * comes with what its attempt needs, read in the claim's statement. With a
 * `floor`, only rows due from then on (db/floor.ts).
 */
export async function deliveryClaim(
  db: Db,
  now: Date,
  leaseUntil: Date,
  room: ClaimRoom,
  floor: Date | null = null,
): Promise<DeliveryWork[]> {
  // Unnamed: planned at every run. A named statement keeps the generic plan its
  // connection made on a young table, which scans the grown one (seq scans of
  // webhook_deliveries and outbound_events). Measured under the pipeline bench: named
  // 1.66 ms a claim; unnamed 0.94 ms, 0.67 of it planning.
  //
  // The window is a walk of one table in index order that stops when it is full,
  // whatever the statistics say: the rooms are read from the arrays, not joined, and
  // its LIMIT is a value the planner cannot see, so it plans for a fraction of the
  // rows and takes the ordered walk. With the rooms joined and the LIMIT a constant,
  // statistics taken before a burst (a few due rows, or none) made it read every due
  // row and sort them for each claim: all 2,000 of a backlog, 4 ms a claim.
  const { rows } = await db.query<WorkRow>({
    text: `WITH due AS (
             -- rows of an endpoint or an account with no room left are passed over before the window
             SELECT d.id, d.endpoint_id, d.relay_after
               FROM webhook_deliveries d
              WHERE d.relay_after <= $1 -- only a pending delivery has one (the audit holds this)
                AND d.relay_after >= $11 -- from the relay's floor (db/floor.ts), or from the head
                AND coalesce(($5::int[])[array_position($4::text[], d.endpoint_id)], $6) > 0
                -- an account's room is looked up only while some account has none
                AND ((SELECT $7 > 0 AND coalesce(min(room), 1) > 0 FROM unnest($9::int[]) AS room)
                     OR coalesce(($9::int[])[array_position($8::text[], (
                          SELECT e.account_id FROM webhook_endpoints e WHERE e.id = d.endpoint_id))], $7) > 0)
              ORDER BY d.relay_after, d.id
              LIMIT (SELECT $10::int)
           ), ranked AS (
             SELECT id, relay_after, coalesce(($5::int[])[array_position($4::text[], endpoint_id)], $6) AS endpoint_room,
                    coalesce(($9::int[])[array_position($8::text[], account_id)], $7) AS account_room,
                    row_number() OVER (PARTITION BY endpoint_id ORDER BY relay_after, id) AS nth_of_endpoint,
                    row_number() OVER (PARTITION BY account_id ORDER BY relay_after, id) AS nth_of_account
               FROM (SELECT due.*, (SELECT e.account_id FROM webhook_endpoints e WHERE e.id = due.endpoint_id) AS account_id
                       FROM due) AS due
           ), take AS (
             -- driven from the window, by primary key, in the window's order: never a walk of the backlog.
             -- Still due once locked (another claim may have leased it since), read so that the relay
             -- index cannot serve it: the planner took that index, row after row, on young statistics.
             SELECT d.id FROM ranked r JOIN webhook_deliveries d ON d.id = r.id
              WHERE r.nth_of_endpoint <= r.endpoint_room AND r.nth_of_account <= r.account_room
                AND coalesce(d.relay_after, 'infinity') <= $1
              ORDER BY r.relay_after, r.id
              LIMIT $3
                FOR UPDATE OF d SKIP LOCKED
           ), claimed AS (
             -- by the taken ids as an array, so it is an index lookup whatever the statistics say
             UPDATE webhook_deliveries d SET relay_after = $2 WHERE d.id = ANY (ARRAY(SELECT id FROM take)) RETURNING d.*
           )
           -- each with what its attempt needs: no load per delivery
           SELECT ${WORK_COLUMNS}
             FROM claimed d
             ${WORK_JOINS}
            ORDER BY d.id`,
    values: [
      now,
      leaseUntil,
      room.limit,
      room.endpoints,
      room.endpointRooms,
      room.perEndpoint,
      room.perAccount,
      room.accounts,
      room.accountRooms,
      room.limit * CLAIM_WINDOW_PER_ROW,
      floor ?? '-infinity',
    ],
  });
  return rows.map(workOf);
}

/**
 * The oldest relay time of a delivery the relay may take or holds a lease on, from
 * the head of the relay index: where the relay's claims may start (db/floor.ts).
 * Unnamed, so it is planned at every run (once a second): a plan kept from a young
 * table would scan the grown one.
 */
export async function deliveryRelayOldest(db: Db): Promise<Date | null> {
  const { rows } = await db.query<{ relay_after: Date }>(
    'SELECT relay_after FROM webhook_deliveries WHERE relay_after IS NOT NULL ORDER BY relay_after, id LIMIT 1',
  );
  return rows[0]?.relay_after ?? null;
}

/** The relay lets go of a pending delivery whose job (its lane's) is queued in the same transaction. */
export async function deliveryUnrelay(tx: Tx, id: string): Promise<boolean> {
  const { rowCount } = await tx.query({
    name: 'delivery_unrelay',
    text: `UPDATE webhook_deliveries SET relay_after = NULL WHERE id = $1 AND relay_after IS NOT NULL`,
    values: [id],
  });
  return rowCount === 1;
}

/**
 * The relay lets go of an endpoint's waiting deliveries (due, not leased to an
 * attempt in flight) because the endpoint has just started failing: its lane
 * takes them over as the fan-out would have given them to it (schedule.ts), in
 * the caller's transaction, which holds the endpoint's row. One statement, so
 * however many wait, the hand-over is one commit.
 */
export async function deliveriesUnrelayForEndpoint(
  tx: Tx,
  endpointId: string,
  now: Date,
): Promise<DeliveryToSchedule[]> {
  const { rows } = await tx.query<DeliveryToSchedule>({
    name: 'deliveries_unrelay_for_endpoint',
    text: `UPDATE webhook_deliveries SET relay_after = NULL
            WHERE endpoint_id = $1 AND status = 'pending' AND relay_after <= $2
           RETURNING id, endpoint_id, status, true AS endpoint_failing, false AS relayed`,
    values: [endpointId, now],
  });
  return rows;
}

/**
 * The relay's claimed deliveries, due again at `at`: handed back (no room for one
 * after all, or its attempt failed to run), or, with `heldPast`, the leases of its
 * attempts in flight extended, each only while still held past it: a delivery its
 * attempt handed back meanwhile (due now, or within a second) is left alone,
 * whichever commits first. A delivery moved on meanwhile is left alone.
 */
export async function deliveryRelayAt(
  db: Db,
  ids: string[],
  at: Date,
  heldPast: Date | '-infinity' = '-infinity',
): Promise<number> {
  const { rowCount } = await db.query({
    // Unnamed, so planned at every run: a relay's connection runs it from its first
    // moments, and the generic plan a named statement keeps from a young table scans
    // the grown one (measured under the pipeline bench: 2.4 ms a hand-back).
    // Locked in id order, as a success batch locks them (deliverySucceedMany): in the
    // heap's order a renewal and a batch over the same rows can each hold what the
    // other waits for, and the deadlock's victim may be the batch, whose deliveries
    // are then sent again.
    text: `WITH held AS (
             SELECT id FROM webhook_deliveries WHERE id = ANY ($1::text[]) AND relay_after > $3 ORDER BY id FOR UPDATE
           )
           UPDATE webhook_deliveries SET relay_after = $2 WHERE id = ANY (ARRAY(SELECT id FROM held))`,
    values: [ids, at, heldPast],
  });
  return rowCount ?? 0;
}

/**
 * A disabled endpoint's pending deliveries stop; they can be redelivered after
 * re-enabling. Locked in id order, as a success batch of attempts still in flight
 * to that endpoint locks them (deliverySucceedMany), so the two never deadlock.
 */
export async function deliverySkipPending(tx: Tx, endpointId: string): Promise<number> {
  const { rowCount } = await tx.query({
    name: 'delivery_skip_pending',
    text: `WITH pending AS (
             SELECT id FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'pending' ORDER BY id FOR UPDATE
           )
           UPDATE webhook_deliveries SET status = 'skipped', next_attempt_at = NULL, relay_after = NULL, updated_at = now()
            WHERE id = ANY (ARRAY(SELECT id FROM pending))`,
    values: [endpointId],
  });
  return rowCount ?? 0;
}

/**
 * The deliveries of an event whose endpoints still exist and are enabled: what a
 * redelivery attempts again, whatever their status (delivery/schedule.ts gives
 * each a redelivery job of its own).
 */
export async function deliveriesToRedeliver(db: Db, eventId: string): Promise<DeliveryToSchedule[]> {
  const { rows } = await db.query<DeliveryToSchedule>({
    name: 'deliveries_to_redeliver',
    text: `SELECT d.id, d.endpoint_id, d.status, e.consecutive_failures > 0 AS endpoint_failing, false AS relayed
             FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
            WHERE d.event_id = $1 AND e.deleted_at IS NULL AND e.enabled
            ORDER BY d.id`,
    values: [eventId],
  });
  return rows;
}

/** A redelivery that got its 2xx: the delivery has now succeeded, whatever it was (a retry still due finds it done). */
export async function deliveryMarkRedelivered(tx: Tx, id: string): Promise<boolean> {
  const { rowCount } = await tx.query({
    name: 'delivery_mark_redelivered',
    text: `UPDATE webhook_deliveries SET status = 'succeeded', next_attempt_at = NULL, relay_after = NULL, updated_at = now()
            WHERE id = $1 AND status <> 'succeeded'`,
    values: [id],
  });
  return rowCount === 1;
}

export async function deliveryListForEvent(
  db: Db,
  eventId: string,
): Promise<(DeliveryRow & { url: string; attempt_log: AttemptRow[] })[]> {
  const { rows } = await db.query({
    name: 'delivery_list_for_event',
    text: `SELECT ${DELIVERY_COLUMNS.split(', ')
      .map((c) => `d.${c}`)
      .join(', ')}, e.url,
                  coalesce((SELECT json_agg(json_build_object(${ATTEMPT_COLUMNS.split(', ')
                    .map((c) => `'${c}', a.${c}`)
                    .join(', ')}) ORDER BY a.attempt)
                              FROM webhook_attempts a WHERE a.delivery_id = d.id), '[]') AS attempt_log
             FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id
            WHERE d.event_id = $1
            ORDER BY d.id`,
    values: [eventId],
  });
  return rows;
}

export interface EndpointAttemptRow extends AttemptRow {
  event_id: string;
  event_type: EventType;
  succeeded: boolean;
}

/**
 * An endpoint's attempts, newest first, across all its deliveries: its health.
 * Attempt ids are time-ordered, so `id < startingAfter` pages like every list.
 */
/** Whether the endpoint has this attempt (a list's cursor). */
export async function attemptOfEndpoint(db: Db, endpointId: string, id: string): Promise<boolean> {
  const { rows } = await db.query({
    name: 'attempt_of_endpoint',
    text: `SELECT 1 FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
            WHERE a.id = $1 AND d.endpoint_id = $2`,
    values: [id, endpointId],
  });
  return rows.length === 1;
}

export async function attemptListForEndpoint(
  db: Db,
  endpointId: string,
  limit: number,
  startingAfter: string | null,
): Promise<EndpointAttemptRow[]> {
  const { rows } = await db.query<EndpointAttemptRow>({
    name: 'attempt_list_for_endpoint',
    text: `SELECT ${ATTEMPT_COLUMNS_OF_A}, d.event_id, ev.type AS event_type,
                  coalesce(a.response_status BETWEEN 200 AND 299, false) AS succeeded
             FROM webhook_attempts a
             JOIN webhook_deliveries d ON d.id = a.delivery_id
             JOIN outbound_events ev ON ev.id = d.event_id
            WHERE d.endpoint_id = $1 AND ($2::text IS NULL OR a.id < $2)
            ORDER BY a.id DESC LIMIT $3`,
    values: [endpointId, startingAfter, limit + 1],
  });
  return rows;
}
