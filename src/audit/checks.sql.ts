// The checks `handset audit` runs: the invariants as SQL, one statement per rule,
// each over a whole table. A check's statement selects one row per subject it
// examines (a carrier event, a message, a leg, …) with the subject's `id` and
// `ok`, whether the rule holds for it; `ok` that is false or NULL is a violation
// (unexpected NULLs count against the data, not for it). audit.ts counts and
// samples those rows. Violations count subjects, not groups: two messages that
// share one carrier id are two offending messages, and both ids are sampled, so
// the operator sees the pair.
//
// Everything the pipeline writes, it writes in the transaction of the transition
// that earned it (the event row and its job, a status and its customer event, a
// dispatch and its bill, a claim and its leg, an event and its deliveries and
// their jobs). So apart from carrier events still waiting for their first run
// (the grace period), a consistent snapshot of a live system satisfies every
// check; nothing here waits for the system to go quiet. The one rule that must
// reconstruct the past from timestamps, "subscribed at the time", says how it
// can be wrong where it is defined.

import { DELIVERY_KEY_PREFIX, DISPATCH_KEY_PREFIX } from '../jobs/keys.js';
import { ABOUT_ENDPOINT_EVENT_TYPES, TEST_EVENT_TYPE, UNSEQUENCED_EVENT_TYPES } from '../outbox/outbox.sql.js';

export type Invariant = 1 | 2 | 3 | 4 | 5 | 6 | 7 | 8 | 9 | 10 | 11 | 12;

/**
 * How long past its expected moment a subject may wait for the carrier before
 * reconciliation must have asked: for a call leg or an inbound caller
 * HANDSET_RECONCILE_INTERVAL + HANDSET_RECONCILE_AFTER, for a sent message's
 * terminal receipt the interval + HANDSET_RECONCILE_MESSAGE_AFTER, in ms.
 */
export interface WaitBounds {
  /** Each recorded setting's bound, and when it was last in force (reconcile/bounds.sql.ts). */
  recordedMs: number[];
  lastInForce: Date[];
  /** A subject no recorded setting was in force for since it began waiting: the latest recorded, else the configured. */
  otherwiseMs: number;
}

export interface CheckOptions {
  graceSeconds: number;
  call: WaitBounds;
  message: WaitBounds;
  /** The carrier event types that are receipts about messages we sent. */
  receiptEventTypes: readonly string[];
}

/**
 * The bound (ms, grace included) a subject waiting since `since` (an SQL
 * expression) is judged by: the most lenient of the settings in force at any time
 * since then. Reconciliation ran with those while it waited, so it may not have
 * asked sooner; a setting retired before it began waiting does not excuse it.
 * Takes $2 … $5 (waitValues).
 */
const boundSince = (since: string) =>
  `(SELECT coalesce(max(b.ms) FILTER (WHERE b.seen >= ${since}), $4::float8) + $5::float8
      FROM unnest($2::float8[], $3::timestamptz[]) AS b(ms, seen))`;
const waitValues = (w: WaitBounds, o: CheckOptions) => [
  w.recordedMs,
  w.lastInForce,
  w.otherwiseMs,
  o.graceSeconds * 1000,
];

export interface CheckDef {
  /** Stable machine name, for --json readers. */
  key: string;
  invariant: Invariant;
  /** The rule, as the report prints it. */
  name: string;
  /** What `checked` counts, plural ("messages"). */
  unit: (o: CheckOptions) => string;
  /**
   * Selects `id text, ok boolean`, one row per subject. $1 is taken by the
   * sample limit; `values` fills $2, $3, … .
   */
  subjects: string;
  values?: (o: CheckOptions) => unknown[];
}

const BILLS_BY_SOURCE = `
  SELECT source_id,
         count(*) AS bills,
         bool_and(kind IN ('sms_segment_outbound', 'mms_outbound')) AS outbound,
         bool_and(kind IN ('sms_segment_inbound', 'mms_inbound')) AS inbound,
         bool_and(kind = 'call_minute') AS minutes,
         min(quantity) AS quantity
    FROM usage_records
   GROUP BY source_id`;

/**
 * Joins `j`, the job keyed $2 || `subjectId` if it will still run: attempts left,
 * or running now (a re-run after a crash is the sweeper's). One out of attempts
 * and not running never runs again, so it joins nothing.
 */
const liveJobOf = (subjectId: string) => `
        LEFT JOIN graphile_worker.jobs j
               ON j.key = $2 || ${subjectId}
              AND (j.attempts < j.max_attempts OR j.locked_at IS NOT NULL)`;

export const CHECKS: readonly CheckDef[] = [
  // 1 ───────────────────────────────────────────────────────────────────────
  {
    key: 'carrier_events.stored_once',
    invariant: 1,
    name: 'carrier event stored once per carrier event id',
    unit: () => 'carrier events',
    subjects: `
      SELECT id, count(*) OVER (PARTITION BY carrier, carrier_event_id) = 1 AS ok
        FROM carrier_events`,
  },
  {
    // An event younger than the grace period may simply not have had its first
    // run yet. An event whose processing threw has its last error recorded while
    // the job retries; that is an answer, not a silence.
    key: 'carrier_events.processed',
    invariant: 1,
    name: 'carrier event processed or its error recorded',
    unit: (o) => `carrier events older than ${o.graceSeconds} s`,
    subjects: `
      SELECT id, processed_at IS NOT NULL OR error IS NOT NULL AS ok
        FROM carrier_events
       WHERE created_at < now() - make_interval(secs => $2::float8)`,
    values: (o) => [o.graceSeconds],
  },

  // 2 ───────────────────────────────────────────────────────────────────────
  {
    key: 'messages.one_per_carrier_id',
    invariant: 2,
    name: 'one message per carrier message id',
    unit: () => 'messages with a carrier id',
    subjects: `
      SELECT id, count(*) OVER (PARTITION BY carrier, carrier_message_id) = 1 AS ok
        FROM messages
       WHERE carrier_message_id IS NOT NULL`,
  },

  // 3 ───────────────────────────────────────────────────────────────────────
  {
    // Per message: at most one terminal event and at most one event of each type;
    // each status the message holds (or held: sent_at) has exactly its one event,
    // and no event announces a status it does not hold; at most one terminal word
    // from anyone was ever applied (the history keeps refused words as `refused`).
    key: 'messages.terminal_once',
    invariant: 3,
    name: 'message terminal status, one event per transition',
    unit: () => 'messages',
    subjects: `
      WITH ev AS (
        SELECT subject_id,
               count(*) FILTER (WHERE type = 'message.sent')      AS sent,
               count(*) FILTER (WHERE type = 'message.delivered') AS delivered,
               count(*) FILTER (WHERE type = 'message.failed')    AS failed,
               count(*) FILTER (WHERE type = 'message.canceled')  AS canceled,
               count(*) FILTER (WHERE type = 'message.received')  AS received
          FROM outbound_events
         WHERE type LIKE 'message.%'
         GROUP BY subject_id
      ), applied AS (
        SELECT message_id, count(*) AS terminal
          FROM message_status_history
         WHERE effect = 'applied' AND status IN ('delivered', 'failed', 'canceled')
         GROUP BY message_id
      ), n AS (
        SELECT m.id, m.status, m.sent_at,
               coalesce(ev.sent, 0) AS sent, coalesce(ev.delivered, 0) AS delivered,
               coalesce(ev.failed, 0) AS failed, coalesce(ev.canceled, 0) AS canceled,
               coalesce(ev.received, 0) AS received, coalesce(applied.terminal, 0) AS applied_terminal
          FROM messages m
          LEFT JOIN ev ON ev.subject_id = m.id
          LEFT JOIN applied ON applied.message_id = m.id
      )
      SELECT id,
             delivered + failed + canceled <= 1
         AND greatest(sent, delivered, failed, canceled, received) <= 1
         AND (status = 'delivered') = (delivered = 1)
         AND (status = 'failed') = (failed = 1)
         AND (status = 'canceled') = (canceled = 1)
         AND (status = 'received') = (received = 1)
         AND (sent_at IS NOT NULL) = (sent = 1)
         AND applied_terminal <= 1 AS ok
        FROM n`,
  },

  // 4 ───────────────────────────────────────────────────────────────────────
  {
    // Dispatched (sent_at set) outbound: one outbound bill of the carrier's part
    // count when it gave one, else of `segments`;
    // received inbound: one inbound bill of `segments`; anything else (queued,
    // scheduled, canceled, refused at send): no bill at all.
    key: 'messages.billed_once',
    invariant: 4,
    name: 'message segments billed exactly once',
    unit: () => 'messages',
    subjects: `
      WITH u AS (${BILLS_BY_SOURCE})
      SELECT m.id,
             CASE WHEN m.direction = 'outbound' AND m.sent_at IS NOT NULL
                    THEN u.bills = 1 AND u.outbound AND u.quantity = coalesce(m.carrier_segments, m.segments)
                  WHEN m.direction = 'inbound' AND m.status = 'received'
                    THEN u.bills = 1 AND u.inbound AND u.quantity = m.segments
                  ELSE u.bills IS NULL
             END AS ok
        FROM messages m
        LEFT JOIN u ON u.source_id = m.id`,
  },
  {
    // A completed call: one call_minute bill of ceil(duration/60) (a 0 s call
    // bills one row of 0). Missed, ringing or still talking: no bill.
    key: 'calls.billed_once',
    invariant: 4,
    name: 'call minutes billed once per completed call',
    unit: () => 'calls',
    subjects: `
      WITH u AS (${BILLS_BY_SOURCE})
      SELECT c.id,
             CASE WHEN c.status = 'completed'
                    THEN u.bills = 1 AND u.minutes AND u.quantity = ceil(c.duration_seconds / 60.0)
                  ELSE u.bills IS NULL
             END AS ok
        FROM calls c
        LEFT JOIN u ON u.source_id = c.id`,
  },
  {
    // The ledger seen from its side: a bill whose source is no message or call
    // (or one of another account, or the wrong direction) bills for nothing.
    key: 'usage.has_source',
    invariant: 4,
    name: 'every bill is for a message, call or recording of its account',
    unit: () => 'usage records',
    subjects: `
      SELECT u.id,
             CASE WHEN u.kind = 'call_minute' THEN c.account_id = u.account_id
                  WHEN u.kind IN ('recording_minute', 'transcription_minute') THEN r.account_id = u.account_id
                  WHEN u.kind IN ('sms_segment_outbound', 'mms_outbound')
                    THEN m.direction = 'outbound' AND m.account_id = u.account_id
                  ELSE m.direction = 'inbound' AND m.account_id = u.account_id
             END AS ok
        FROM usage_records u
        LEFT JOIN messages m ON m.id = u.source_id
        LEFT JOIN calls c ON c.id = u.source_id
        LEFT JOIN recordings r ON r.id = u.source_id`,
  },

  // 5 ───────────────────────────────────────────────────────────────────────
  {
    key: 'legs.one_per_position',
    invariant: 5,
    name: 'each ring position dialed at most once',
    unit: () => 'legs',
    subjects: `
      SELECT id, count(*) OVER (PARTITION BY call_id, position) = 1 AS ok
        FROM call_legs`,
  },
  {
    // "Dialed" is judged by the claim, call_legs.created_at: the leg row is
    // inserted in the compare-and-swap transaction that won its position, and
    // that CAS only wins while the call is ringing. dialed_at is later and may
    // legitimately fall after the answer or the end: the dial job checks the
    // call is still ringing before the carrier request, and a call that ends
    // while the request is in flight has the new leg hung up at once.
    //
    // "After" is taken in the database's serial order, not by clocks: the
    // call.answered and call.completed|missed events carry the call's legs as
    // read under the call's row lock in the very transaction that answered or
    // ended it, so a leg missing from them was claimed after. calls.answered_at
    // and ended_at are the carrier's clock (the webhook's occurred_at): a caller
    // hanging up while we claim the next target is recorded as ending before a
    // claim that in fact came first. Only a call without such an event (itself a
    // broken one-event-per-transition promise) falls back to comparing created_at with them.
    key: 'legs.claimed_while_ringing',
    invariant: 5,
    name: 'no leg claimed after the call was answered or ended',
    unit: () => 'legs',
    subjects: `
      WITH marks AS (
        SELECT DISTINCT ON (subject_id, answered)
               subject_id, answered, jsonb_path_query_array(data, '$.legs[*].id') AS legs
          FROM (SELECT id, subject_id, data, type = 'call.answered' AS answered
                  FROM outbound_events
                 WHERE type IN ('call.answered', 'call.completed', 'call.missed')) e
         ORDER BY subject_id, answered, id
      )
      SELECT l.id,
             NOT (c.answered_at IS NOT NULL
                  AND CASE WHEN a.subject_id IS NOT NULL THEN NOT a.legs @> jsonb_build_array(l.id)
                           ELSE l.created_at > c.answered_at END)
         AND NOT (c.ended_at IS NOT NULL
                  AND CASE WHEN e.subject_id IS NOT NULL THEN NOT e.legs @> jsonb_build_array(l.id)
                           ELSE l.created_at > c.ended_at END) AS ok
        FROM call_legs l
        JOIN calls c ON c.id = l.call_id
        LEFT JOIN marks a ON a.subject_id = c.id AND a.answered
        LEFT JOIN marks e ON e.subject_id = c.id AND NOT e.answered`,
  },
  {
    // Each claim moves the cursor by one and inserts that position's leg in the
    // same transaction, so the legs sit exactly at 0 … next-1: none at or past
    // the cursor (a leg dialed without a claim), none missing below it (a cursor
    // pointing past what was claimed). A duplicate at one position is the
    // check above.
    key: 'calls.ring_cursor',
    invariant: 5,
    name: 'ring cursor matches the claimed legs',
    unit: () => 'calls',
    subjects: `
      WITH l AS (
        SELECT call_id, count(DISTINCT position) AS positions, min(position) AS first, max(position) AS last
          FROM call_legs
         GROUP BY call_id
      )
      SELECT c.id,
             CASE WHEN jsonb_typeof(c.ring_plan -> 'next') = 'number'
                  THEN coalesce(l.positions, 0) = (c.ring_plan ->> 'next')::numeric
                   AND coalesce(l.first, 0) >= 0
                   AND coalesce(l.last, -1) = (c.ring_plan ->> 'next')::numeric - 1
             END AS ok
        FROM calls c
        LEFT JOIN l ON l.call_id = c.id`,
  },
  {
    key: 'calls.answered_by_a_leg',
    invariant: 5,
    name: 'an answered call names one of its legs',
    unit: () => 'answered calls',
    subjects: `
      SELECT c.id, l.id IS NOT NULL AS ok
        FROM calls c
        LEFT JOIN call_legs l ON l.id = c.answered_leg_id AND l.call_id = c.id
       WHERE c.status IN ('in_progress', 'completed')`,
  },

  // 6 ───────────────────────────────────────────────────────────────────────
  {
    key: 'deliveries.one_per_endpoint',
    invariant: 6,
    name: 'one delivery per event and endpoint',
    unit: () => 'deliveries',
    subjects: `
      SELECT id, count(*) OVER (PARTITION BY event_id, endpoint_id) = 1 AS ok
        FROM webhook_deliveries`,
  },
  {
    key: 'deliveries.same_account',
    invariant: 6,
    name: "delivery goes to an endpoint of the event's account",
    unit: () => 'deliveries',
    subjects: `
      SELECT d.id, e.account_id = ev.account_id AS ok
        FROM webhook_deliveries d
        LEFT JOIN outbound_events ev ON ev.id = d.event_id
        LEFT JOIN webhook_endpoints e ON e.id = d.endpoint_id`,
  },
  {
    // A pending delivery moves on only when the relay claims it (relay_after set:
    // its first attempt, delivery/relay.ts) or its job runs; with neither it is
    // lost. Its job is keyed by jobKeys.delivery (lane moves and retries use the
    // key; a re-add while the job runs re-keys a fresh job). A job that has used
    // up its attempts and is not running will never run again: that is lost too.
    key: 'deliveries.pending_has_job',
    invariant: 6,
    name: 'pending delivery has its job or is the relay’s',
    unit: () => 'pending deliveries',
    subjects: `
      SELECT d.id, d.relay_after IS NOT NULL OR j.id IS NOT NULL AS ok
        FROM webhook_deliveries d ${liveJobOf('d.id')}
       WHERE d.status = 'pending'`,
    values: () => [DELIVERY_KEY_PREFIX],
  },
  {
    // Every move off pending clears relay_after in the same statement, and the
    // relay's claim relies on it: it takes due rows by relay_after alone (its
    // index), so a finished delivery still marked would be attempted again.
    key: 'deliveries.relayed_pending',
    invariant: 6,
    name: 'only a pending delivery is the relay’s',
    unit: () => 'deliveries',
    subjects: `
      SELECT id, relay_after IS NULL OR status = 'pending' AS ok
        FROM webhook_deliveries`,
  },
  {
    // emit() gives an event one delivery per endpoint of its account that is not
    // deleted and is subscribed to its type (a disabled one gets a `skipped`
    // delivery), all in the event's transaction; an operational event about an
    // endpoint skips that endpoint, a test event goes to its endpoint alone. "At the time" is read from
    // timestamps, so this is approximate in two ways: event_types is today's,
    // so an endpoint that later subscribed to a type is held to events of that
    // type from before (a false alarm; one that later unsubscribed is simply not
    // required); and created_at / deleted_at are their transactions' start
    // times, so an endpoint created or deleted by a transaction in flight during
    // the event's own (a few milliseconds) can be misjudged. Ties count as "not
    // at the time".
    key: 'events.delivered_to_subscribers',
    invariant: 6,
    name: 'event has a delivery per endpoint subscribed at the time',
    unit: () => 'events',
    subjects: `
      SELECT ev.id,
             NOT EXISTS (
               SELECT 1
                 FROM webhook_endpoints e
                WHERE e.account_id = ev.account_id
                  AND e.created_at < ev.created_at
                  AND (e.deleted_at IS NULL OR e.deleted_at > ev.created_at)
                  AND CASE WHEN ev.type = $3 THEN e.id = ev.subject_id
                           ELSE (cardinality(e.event_types) = 0 OR ev.type = ANY (e.event_types))
                                AND NOT (ev.type = ANY ($2::text[]) AND e.id = ev.subject_id) END
                  AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = ev.id AND d.endpoint_id = e.id)
             ) AS ok
        FROM outbound_events ev`,
    values: () => [ABOUT_ENDPOINT_EVENT_TYPES, TEST_EVENT_TYPE],
  },

  // 7 ──────────────────────────────────────────────────────────────────────────
  {
    // A leg still up in our books is either not yet past its expected moment
    // (ringing: its ring timeout; answered: its answer) by the reconciliation
    // bound, or the carrier has been asked about it within that bound.
    key: 'legs.not_waiting_forever',
    invariant: 7,
    name: 'no leg waits past its bound without the carrier asked',
    unit: () => 'legs still up',
    subjects: `
      SELECT w.id,
             w.since + make_interval(secs => w.bound / 1000) > now()
             OR w.checked_at > now() - make_interval(secs => w.bound / 1000) AS ok
        FROM (SELECT s.*, ${boundSince('s.since')} AS bound
                FROM (SELECT l.id, l.checked_at,
                             coalesce(l.answered_at, l.dialed_at + make_interval(secs => (c.ring_plan->>'timeout')::int)) AS since
                        FROM call_legs l JOIN calls c ON c.id = l.call_id
                       WHERE l.ended_at IS NULL AND l.carrier_ref IS NOT NULL) s) w`,
    values: (o) => waitValues(o.call, o),
  },
  {
    // A call not ended always has a leg still up (the claim of the next target,
    // the dial that failed and the end of the plan all happen in the transaction
    // that ended the previous leg), and an inbound caller past the bound has been
    // asked about within it.
    key: 'calls.not_waiting_forever',
    invariant: 7,
    name: 'no call waits forever: a leg up, the caller asked within the bound',
    unit: () => 'calls not ended',
    subjects: `
      SELECT c.id,
             EXISTS (SELECT 1 FROM call_legs l WHERE l.call_id = c.id AND l.ended_at IS NULL)
             AND (c.caller_ref IS NULL
                  OR c.created_at + make_interval(secs => w.bound / 1000) > now()
                  OR c.caller_checked_at > now() - make_interval(secs => w.bound / 1000)) AS ok
        FROM calls c
       CROSS JOIN LATERAL (SELECT ${boundSince('c.created_at')} AS bound) w
       WHERE c.ended_at IS NULL`,
    values: (o) => waitValues(o.call, o),
  },
  {
    // A sent message without a terminal receipt past its bound has been looked
    // up (the carrier keeps messages ten days; older ones cannot be).
    key: 'messages.not_waiting_forever',
    invariant: 7,
    name: 'no sent message waits past its bound without the carrier asked',
    unit: () => 'sent messages',
    subjects: `
      SELECT m.id,
             m.sent_at + make_interval(secs => w.bound / 1000) > now()
             OR m.checked_at IS NOT NULL
             OR m.sent_at < now() - interval '10 days' AS ok
        FROM messages m
       CROSS JOIN LATERAL (SELECT ${boundSince('m.sent_at')} AS bound) w
       WHERE m.status = 'sent'`,
    values: (o) => waitValues(o.message, o),
  },
  {
    // A queued or scheduled message moves on through its dispatch job, keyed by
    // jobKeys.dispatch (a re-enqueue while it runs re-keys a fresh job), or,
    // dispatched in batches, through the dispatch line: a queued message there is
    // the dispatchers' until its lease, if it has one, runs out (then the sweep
    // gives it a job), and a scheduled one joins the line at its send_at. With no
    // job that can still run (none, or one out of attempts and not running), a lease
    // run out or a send_at passed by more than the grace, nothing will ever send,
    // fail or ask about it. (A queued message with neither job nor lease is the
    // line's; were no batched dispatcher running, it would wait for one.)
    key: 'messages.waiting_has_job',
    invariant: 7,
    name: 'a queued or scheduled message has its dispatch job, or its place in the dispatch line',
    unit: () => 'queued or scheduled messages',
    subjects: `
      SELECT m.id,
             j.id IS NOT NULL
             OR (m.status = 'queued'
                 AND (m.dispatch_lease_until IS NULL
                      OR m.dispatch_lease_until > now() - make_interval(secs => $3::float8)))
             OR (m.status = 'scheduled' AND m.send_at > now() - make_interval(secs => $3::float8)) AS ok
        FROM messages m ${liveJobOf('m.id')}
       WHERE m.status IN ('queued', 'scheduled')`,
    values: (o) => [DISPATCH_KEY_PREFIX, o.graceSeconds],
  },
  {
    // A completed call lasted from its answer to its end, both the carrier's
    // times: the answering leg's answer is the call's, and an outbound call ends
    // exactly when that leg does (nothing else can end it once answered).
    key: 'calls.duration_from_carrier',
    invariant: 7,
    name: "a completed call's duration is the carrier's answer to its end",
    unit: () => 'completed calls',
    subjects: `
      SELECT c.id,
             c.duration_seconds = greatest(0, ceil(extract(epoch FROM c.ended_at - c.answered_at)))::int
             AND c.answered_at = l.answered_at
             AND (c.direction = 'inbound' OR l.ended_at = c.ended_at) AS ok
        FROM calls c
        LEFT JOIN call_legs l ON l.id = c.answered_leg_id
       WHERE c.status = 'completed'`,
  },

  // 8 ──────────────────────────────────────────────────────────────────────────
  {
    // A message sent twice to the carrier is a second carrier message id whose
    // receipts match no message of ours. (Events stored before the subject was
    // recorded cannot be judged.)
    key: 'messages.sent_once',
    invariant: 8,
    name: 'every receipt is about a message we sent once',
    unit: (o) => `receipts older than ${o.graceSeconds} s`,
    subjects: `
      SELECT ce.id,
             EXISTS (SELECT 1 FROM messages m WHERE m.carrier = ce.carrier AND m.carrier_message_id = ce.subject) AS ok
        FROM carrier_events ce
       WHERE ce.event_type = ANY ($2::text[]) AND ce.subject IS NOT NULL
         AND ce.created_at < now() - make_interval(secs => $3::float8)`,
    values: (o) => [o.receiptEventTypes, o.graceSeconds],
  },

  // 9 ──────────────────────────────────────────────────────────────────────────
  {
    key: 'recordings.stored_once',
    invariant: 9,
    name: 'one recording per carrier recording id, announced once',
    unit: () => 'recordings',
    subjects: `
      SELECT r.id,
             count(*) OVER (PARTITION BY r.carrier, r.carrier_recording_id) = 1
               AND (SELECT count(*) FROM outbound_events e
                     WHERE e.subject_id = r.id AND e.type = 'call.recording.saved') = 1 AS ok
        FROM recordings r`,
  },
  {
    // A transcribe call's recording gets one transcript and one event when it
    // completes; any other recording none. Its status and its text agree.
    key: 'recordings.transcribed_once',
    invariant: 9,
    name: 'a transcript at most once per recording, with exactly one call.transcription.completed',
    unit: () => 'recordings',
    subjects: `
      SELECT r.id,
             (r.transcript IS NOT NULL) = (r.transcription_status = 'completed')
               AND (c.transcribe OR r.transcription_status = 'none')
               AND (SELECT count(*) FROM outbound_events e
                     WHERE e.subject_id = r.id AND e.type = 'call.transcription.completed')
                   = CASE WHEN r.transcription_status = 'completed' THEN 1 ELSE 0 END AS ok
        FROM recordings r JOIN calls c ON c.id = r.call_id`,
  },
  {
    key: 'recordings.billed_once',
    invariant: 9,
    name: 'recording minutes billed once per recording, transcription minutes once per transcript',
    unit: () => 'recordings',
    subjects: `
      SELECT r.id,
             (SELECT count(*) FILTER (WHERE u.kind = 'recording_minute') = 1
                     AND coalesce(sum(u.quantity) FILTER (WHERE u.kind = 'recording_minute'), -1)
                         = ceil(r.duration_seconds / 60.0)
                     AND count(*) FILTER (WHERE u.kind = 'transcription_minute')
                         = CASE WHEN r.transcription_status = 'completed' THEN 1 ELSE 0 END
                     AND count(*) = count(*) FILTER (WHERE u.kind IN ('recording_minute', 'transcription_minute'))
                FROM usage_records u WHERE u.source_id = r.id) AS ok
        FROM recordings r`,
  },

  // 10 ─────────────────────────────────────────────────────────────────────────
  {
    // The dispatcher stamps dispatched_at under the pair's lock after checking the
    // list, and opt-outs are stamped under the same lock, both on the database's
    // clock: a message cleared while its pair was opted out is one the check let
    // through. (Messages dispatched before opt-outs existed have no stamp.)
    key: 'messages.not_to_opted_out',
    invariant: 10,
    name: 'no message handed to the carrier while its recipient was opted out',
    unit: () => 'dispatched messages',
    subjects: `
      SELECT m.id,
             NOT EXISTS (SELECT 1 FROM opt_outs o
                          WHERE o.account_id = m.account_id AND o.number = m.from_number AND o.recipient = m.to_number
                            AND o.created_at < m.dispatched_at
                            AND (o.deleted_at IS NULL OR o.deleted_at > m.dispatched_at)) AS ok
        FROM messages m
       WHERE m.direction = 'outbound' AND m.dispatched_at IS NOT NULL`,
  },
  {
    key: 'opt_outs.one_event_per_change',
    invariant: 10,
    name: 'one opt_out.created per opt-out, and one opt_out.deleted once it ended',
    unit: () => 'opt-outs',
    subjects: `
      SELECT o.id,
             count(*) FILTER (WHERE e.type = 'opt_out.created') = 1
               AND count(*) FILTER (WHERE e.type = 'opt_out.deleted') = CASE WHEN o.deleted_at IS NULL THEN 0 ELSE 1 END
               AND count(e.id) = count(*) FILTER (WHERE e.type IN ('opt_out.created', 'opt_out.deleted')) AS ok
        FROM opt_outs o
        LEFT JOIN outbound_events e ON e.subject_id = o.id
       GROUP BY o.id`,
  },

  // 11 ─────────────────────────────────────────────────────────────────────────
  {
    // The events about one resource, in the order their transitions happened,
    // carry strictly increasing sequences. Event ids start with the millisecond
    // they were made in, under the resource's row lock, so they give that order;
    // two made in the same millisecond are taken in either order. Events that
    // report no transition (a test, an exhausted delivery) carry the sequence as
    // it was and are not counted.
    key: 'events.sequence_increases',
    invariant: 11,
    name: "each event's sequence is above the previous event about the same resource",
    unit: () => 'events with a sequence',
    subjects: `
      SELECT id, seq > coalesce(lag(seq) OVER w, 0) AS ok
        FROM (SELECT id, subject_id, substr(id, 1, strpos(id, '_') + 12) AS ms, (data->>'sequence')::bigint AS seq
                FROM outbound_events
               WHERE data ? 'sequence' AND NOT type = ANY ($2::text[])) e
      WINDOW w AS (PARTITION BY subject_id ORDER BY ms, seq)`,
    values: () => [UNSEQUENCED_EVENT_TYPES],
  },

  // 12 ─────────────────────────────────────────────────────────────────────────
  {
    // Across carriers, at most one carrier took a message: its accepted requests
    // name one message at one carrier (a repeat answered with the first send's
    // replay is the same one), the carrier the message names,
    // under the id it holds; a message that failed over names the fallback it moved
    // to and left a carrier none of whose requests may have been taken; no callback
    // handing back its id (Twilio's marker) names another message at any carrier
    // once it is settled. Billed and announced once, whichever carrier sent it, are
    // invariants 4 and 3, which count per message, not per carrier.
    // A message whose requests went unrecorded (no fallback, a carrier that replays
    // a repeated key) is held to the rest, and to invariant 8.
    key: 'messages.one_carrier',
    invariant: 12,
    name: 'at most one carrier took each message; one that failed over names what sent it',
    unit: () => 'outbound messages',
    subjects: `
      SELECT m.id,
             (SELECT count(DISTINCT (s.carrier, s.carrier_message_id)) FROM message_sends s
               WHERE s.message_id = m.id AND s.outcome = 'accepted') <= 1
         AND NOT EXISTS (SELECT 1 FROM message_sends s
                          WHERE s.message_id = m.id AND s.outcome = 'accepted'
                            AND (s.carrier <> m.carrier OR s.carrier_message_id IS DISTINCT FROM m.carrier_message_id))
         AND (m.failover_reason IS NULL OR (
               m.carrier = m.fallback_carrier AND m.from_number = m.fallback_from
               AND m.failed_over_carrier IS DISTINCT FROM m.carrier
               AND NOT EXISTS (SELECT 1 FROM message_sends s
                                WHERE s.message_id = m.id AND s.carrier = m.failed_over_carrier
                                  AND s.outcome <> 'not_accepted')))
         AND (m.status IN ('queued', 'scheduled') OR NOT EXISTS (
               SELECT 1 FROM carrier_events ce
                WHERE ce.payload ? 'handset_message' AND ce.payload ->> 'handset_message' = m.id
                  AND (ce.carrier <> m.carrier OR ce.subject IS DISTINCT FROM m.carrier_message_id)))
             AS ok
        FROM messages m
       WHERE m.direction = 'outbound'`,
  },
];
