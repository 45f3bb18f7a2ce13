// SQL for messages and message_status_history. Every status change is one
// guarded UPDATE … RETURNING: a row back means the transition applied, no row
// means it was refused (already terminal, canceled, …), which is a normal result.
//
//   scheduled ──claim──▶ queued ──sent──▶ sent ──receipt──▶ delivered | failed
//       │                  │                                 (first terminal word wins)
//       └─cancel─▶ canceled ├─carrier 4xx─▶ failed
//                          ├─recipient opted out─▶ failed (never reached the carrier)
//                          └─fail over─▶ queued (from its fallback number, through its carrier; once)
//   inbound: received (inserted once per carrier message id)

import type { Db } from '../db/pool.js';
import type { Tx } from '../db/tx.js';
import { newId } from '../db/ids.js';
import { MAX_PRIORITY } from '../jobs/enqueue.js';
import type { Encoding } from './segments.js';

export const MESSAGE_STATUSES = ['scheduled', 'queued', 'sent', 'delivered', 'failed', 'canceled', 'received'] as const;
export type MessageStatus = (typeof MESSAGE_STATUSES)[number];
export const MESSAGE_DIRECTIONS = ['outbound', 'inbound'] as const;
export type MessageDirection = (typeof MESSAGE_DIRECTIONS)[number];
export const ENCODINGS = ['GSM-7', 'UCS-2', 'MMS'] as const satisfies readonly Encoding[];
/** Who said what about a message, in its history. */
export const HISTORY_SOURCES = ['api', 'dispatch', 'carrier', 'reconciliation'] as const;
export type HistorySource = (typeof HISTORY_SOURCES)[number];
/** Whether a word about a message changed it. */
export const HISTORY_EFFECTS = ['applied', 'refused', 'informational'] as const;
export type HistoryEffect = (typeof HISTORY_EFFECTS)[number];

export interface MessageRow {
  id: string;
  account_id: string;
  tenant_id: string | null;
  direction: MessageDirection;
  from_number: string;
  to_number: string;
  body: string | null;
  media_urls: string[];
  status: MessageStatus;
  encoding: Encoding;
  segments: number;
  error_code: string | null;
  carrier: string;
  carrier_message_id: string | null;
  send_at: Date | null;
  created_at: Date;
  sent_at: Date | null;
  completed_at: Date | null;
  /** When the carrier was last asked about this message (reconciliation). */
  checked_at: Date | null;
  /** Grows by one with each transition (guarded statements below); customers order events by it. */
  sequence: number;
  /** When the dispatcher cleared it against the opt-out list to go to the carrier (the database's clock). */
  dispatched_at: Date | null;
  /** The parts the carrier said it split the text into (what it bills); `segments` is our estimate. */
  carrier_segments: number | null;
  /** Its place in the dispatch line while queued (its dispatch job's priority); null otherwise. */
  dispatch_rank: number | null;
  /** The account's number on another carrier it may be sent from instead, and that carrier. */
  fallback_from: string | null;
  fallback_carrier: string | null;
  /** Why it failed over (null: it did not), and the number and carrier it left. */
  failover_reason: string | null;
  failed_over_from: string | null;
  failed_over_carrier: string | null;
  /** While a dispatcher holds it (claimed from the line, outcome not yet recorded): until when. */
  dispatch_lease_until: Date | null;
  /** It must leave for the carrier before this (its validity period), or fail as expired. */
  expires_at: Date | null;
}
const MESSAGE_COLUMNS = `id, account_id, tenant_id, direction, from_number, to_number, body, media_urls, status, encoding,
  segments, error_code, carrier, carrier_message_id, send_at, created_at, sent_at, completed_at, checked_at, sequence,
  dispatched_at, carrier_segments, dispatch_rank, fallback_from, fallback_carrier, failover_reason, failed_over_from,
  failed_over_carrier, dispatch_lease_until, expires_at`;
/** The same, qualified, for an UPDATE … FROM that returns the message's row. */
const M_COLUMNS = MESSAGE_COLUMNS.replace(/(^|\s)(\w+)/g, '$1m.$2');

export interface HistoryRow {
  id: string;
  message_id: string;
  source: HistorySource;
  /** The carrier the word came from or was about. */
  carrier: string | null;
  carrier_event_id: string | null;
  status: string;
  carrier_status: string | null;
  error_code: string | null;
  effect: HistoryEffect;
  note: string | null;
  occurred_at: Date;
  created_at: Date;
}
const HISTORY_COLUMNS =
  'id, message_id, source, carrier, carrier_event_id, status, carrier_status, error_code, effect, note, occurred_at, created_at';

/** What became of one request a message made of a carrier (or chose not to make: the carrier was down). */
export const SEND_OUTCOMES = ['pending', 'accepted', 'not_accepted', 'unknown', 'rejected'] as const;
export type SendOutcome = (typeof SEND_OUTCOMES)[number];

export interface SendRow {
  id: string;
  message_id: string;
  carrier: string;
  from_number: string;
  outcome: SendOutcome;
  carrier_message_id: string | null;
  detail: string | null;
  started_at: Date;
  settled_at: Date | null;
}
const SEND_COLUMNS =
  'id::text, message_id, carrier, from_number, outcome, carrier_message_id, detail, started_at, settled_at';

/** The column lists the rows above are typed from, held to the tables by a test. */
export const MESSAGE_TABLE_COLUMNS = {
  messages: MESSAGE_COLUMNS,
  message_status_history: HISTORY_COLUMNS,
  message_sends: SEND_COLUMNS.replace('id::text', 'id'),
};

/**
 * The place a message takes as it joins the dispatch line: one after its account's
 * last message still waiting to be handed to the carrier, or the current round
 * (the lowest place any waiting message holds; 0 when nobody waits) when it has
 * none, at most the job runner's largest priority (a line longer than that keeps
 * its order among equals). The function (migration 0015) reads one end of an
 * index for each: one entry, however long the line and whatever plan the
 * statement keeps.
 */
const NEXT_RANK = (account: string) => `messages_next_dispatch_rank(${account}, ${MAX_PRIORITY})`;

export interface NewOutbound {
  accountId: string;
  tenantId: string | null;
  from: string;
  to: string;
  body: string | null;
  mediaUrls: string[];
  encoding: Encoding;
  segments: number;
  sendAt: Date | null;
  carrier: string;
  /** Another number of the account, on another carrier, to fail over to. */
  fallback?: { from: string; carrier: string } | null;
  /** Seconds from send_at (or its creation) within which it must leave for the carrier, or fail as expired. */
  validitySeconds?: number | null;
}

export async function messageInsertOutbound(tx: Tx, m: NewOutbound): Promise<MessageRow> {
  return (await messagesInsertOutbound(tx, m.accountId, [m]))[0]!;
}

/**
 * Inserts one account's outbound messages in one statement, each `queued` (or
 * `scheduled` with send_at), in the given order.
 * The queued ones take consecutive places in the dispatch line, from the one a
 * single message would take, as if inserted one after another (the function
 * reading the line sees the statement's snapshot, not the rows it inserts).
 */
export async function messagesInsertOutbound(
  tx: Tx,
  accountId: string,
  ms: readonly Omit<NewOutbound, 'accountId'>[],
): Promise<MessageRow[]> {
  if (ms.length === 0) return [];
  // Made here rather than by the column's default, so each row returned is matched to what asked for it.
  const ids = ms.map(() => newId('msg'));
  let queued = 0;
  const { rows } = await tx.query<MessageRow>({
    name: 'messages_insert_outbound',
    text: `WITH line AS (SELECT ${NEXT_RANK('$1')} AS first)
             INSERT INTO messages (id, account_id, tenant_id, direction, from_number, to_number, body, media_urls,
                                   status, encoding, segments, send_at, carrier, dispatch_rank, fallback_from, fallback_carrier,
                                   expires_at)
             SELECT m.id, $1, m.tenant_id, 'outbound', m.from_number, m.to_number, m.body,
                    ARRAY(SELECT jsonb_array_elements_text(m.media_urls)),
                    CASE WHEN m.send_at IS NULL THEN 'queued' ELSE 'scheduled' END, m.encoding, m.segments, m.send_at,
                    m.carrier, CASE WHEN m.send_at IS NULL THEN least(line.first + m.place, ${MAX_PRIORITY}) END,
                    m.fallback_from, m.fallback_carrier,
                    coalesce(m.send_at, now()) + make_interval(secs => m.validity)
               FROM line, unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::jsonb[], $8::text[],
                                 $9::int[], $10::timestamptz[], $11::text[], $12::int[], $13::text[], $14::text[], $15::float8[])
                      WITH ORDINALITY AS m (id, tenant_id, from_number, to_number, body, media_urls, encoding, segments,
                                            send_at, carrier, place, fallback_from, fallback_carrier, validity, n)
              ORDER BY m.n
             RETURNING ${MESSAGE_COLUMNS}`,
    values: [
      accountId,
      ids,
      ms.map((m) => m.tenantId),
      ms.map((m) => m.from),
      ms.map((m) => m.to),
      ms.map((m) => m.body),
      ms.map((m) => JSON.stringify(m.mediaUrls)),
      ms.map((m) => m.encoding),
      ms.map((m) => m.segments),
      ms.map((m) => m.sendAt),
      ms.map((m) => m.carrier),
      ms.map((m) => (m.sendAt ? null : queued++)),
      ms.map((m) => m.fallback?.from ?? null),
      ms.map((m) => m.fallback?.carrier ?? null),
      ms.map((m) => m.validitySeconds ?? null),
    ],
  });
  const byId = new Map(rows.map((r) => [r.id, r]));
  return ids.map((id) => byId.get(id)!);
}

/** Inserts an inbound message once per carrier message id; null for a duplicate. */
export async function messageInsertInbound(
  tx: Tx,
  m: Omit<NewOutbound, 'sendAt'> & { carrierMessageId: string; receivedAt: Date },
): Promise<MessageRow | null> {
  const { rows } = await tx.query<MessageRow>({
    name: 'message_insert_inbound',
    text: `INSERT INTO messages (account_id, tenant_id, direction, from_number, to_number, body, media_urls,
                                 status, encoding, segments, carrier, carrier_message_id, created_at, completed_at)
           VALUES ($1, $2, 'inbound', $3, $4, $5, $6, 'received', $7, $8, $9, $10, $11, $11)
           ON CONFLICT (carrier, carrier_message_id) DO NOTHING
           RETURNING ${MESSAGE_COLUMNS}`,
    values: [
      m.accountId,
      m.tenantId,
      m.from,
      m.to,
      m.body,
      m.mediaUrls,
      m.encoding,
      m.segments,
      m.carrier,
      m.carrierMessageId,
      m.receivedAt,
    ],
  });
  return rows[0] ?? null;
}

/** How many of the account's outbound messages still wait to be sent from this number of this carrier, or may fail over to it. */
export async function messagesWaitingFrom(db: Db, accountId: string, carrier: string, from: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>({
    name: 'messages_waiting_from',
    text: `SELECT count(*)::int AS n FROM messages
            WHERE account_id = $1 AND direction = 'outbound' AND status IN ('scheduled', 'queued')
              AND ((carrier = $2 AND from_number = $3) OR (fallback_carrier = $2 AND fallback_from = $3))`,
    values: [accountId, carrier, from],
  });
  return rows[0]!.n;
}

export async function messageOfAccount(db: Db, accountId: string, id: string): Promise<MessageRow | null> {
  const { rows } = await db.query<MessageRow>({
    name: 'message_of_account',
    text: `SELECT ${MESSAGE_COLUMNS} FROM messages WHERE id = $1 AND account_id = $2`,
    values: [id, accountId],
  });
  return rows[0] ?? null;
}

/** For jobs, which act on a message whoever owns it. */
export async function messageById(db: Db, id: string): Promise<MessageRow | null> {
  const { rows } = await db.query<MessageRow>({
    name: 'message_by_id',
    text: `SELECT ${MESSAGE_COLUMNS} FROM messages WHERE id = $1`,
    values: [id],
  });
  return rows[0] ?? null;
}

export async function messageByCarrierId(
  db: Db,
  carrier: string,
  carrierMessageId: string,
): Promise<MessageRow | null> {
  const { rows } = await db.query<MessageRow>({
    name: 'message_by_carrier_id',
    text: `SELECT ${MESSAGE_COLUMNS} FROM messages WHERE carrier = $1 AND carrier_message_id = $2`,
    values: [carrier, carrierMessageId],
  });
  return rows[0] ?? null;
}

export async function messageList(
  db: Db,
  accountId: string,
  filter: { status?: string | undefined; direction?: string | undefined },
  limit: number,
  startingAfter: string | null,
): Promise<MessageRow[]> {
  const { rows } = await db.query<MessageRow>({
    name: 'message_list',
    text: `SELECT ${MESSAGE_COLUMNS} FROM messages
            WHERE account_id = $1 AND ($2::text IS NULL OR status = $2) AND ($3::text IS NULL OR direction = $3)
              AND ($4::text IS NULL OR id < $4)
            ORDER BY id DESC LIMIT $5`,
    values: [accountId, filter.status ?? null, filter.direction ?? null, startingAfter, limit + 1],
  });
  return rows;
}

/** scheduled → queued once send_at has come: after this, cancel is refused. */
export async function messageClaimScheduled(tx: Tx, id: string, now: Date): Promise<MessageRow | null> {
  const { rows } = await tx.query<MessageRow>({
    name: 'message_claim_scheduled',
    text: `UPDATE messages SET status = 'queued', sequence = sequence + 1,
                               dispatch_rank = ${NEXT_RANK('messages.account_id')}
            WHERE id = $1 AND status = 'scheduled' AND send_at <= $2
            RETURNING ${MESSAGE_COLUMNS}`,
    values: [id, now],
  });
  return rows[0] ?? null;
}

/**
 * Clears a queued message to go to the carrier: stamps dispatched_at unless its
 * recipient is opted out of its from-number. Under the pair's shared lock
 * (optouts.sql.ts), so an opt-out either committed before this and is seen, or
 * is stamped after it. Once stamped, a retry of the same send (same key) is not
 * checked again: the first attempt may already have reached the carrier. Null when
 * the message is not queued or its recipient opted out.
 */
export async function messageClearForDispatch(tx: Tx, id: string): Promise<MessageRow | null> {
  const { rows } = await tx.query<MessageRow>({
    name: 'message_clear_for_dispatch',
    text: `UPDATE messages m SET dispatched_at = coalesce(m.dispatched_at, clock_timestamp())
            WHERE m.id = $1 AND m.status = 'queued'
              AND (m.dispatched_at IS NOT NULL OR NOT EXISTS (
                SELECT 1 FROM opt_outs o
                 WHERE o.account_id = m.account_id AND o.number = m.from_number AND o.recipient = m.to_number
                   AND o.deleted_at IS NULL))
            RETURNING ${MESSAGE_COLUMNS}`,
    values: [id],
  });
  return rows[0] ?? null;
}

/**
 * The head of the dispatch line, locked for this transaction: up to `limit` queued
 * messages never yet handed to a carrier, in the line's order (every account's
 * next message before anyone's following one), skipping rows another dispatcher
 * holds and messages of the carriers in `held` (they asked us to slow down).
 */
export async function messagesLineHead(
  tx: Tx,
  limit: number,
  held: readonly string[],
  paceAheadMs: number,
): Promise<Pick<MessageRow, 'id' | 'account_id' | 'from_number' | 'to_number' | 'carrier'>[]> {
  const { rows } = await tx.query<Pick<MessageRow, 'id' | 'account_id' | 'from_number' | 'to_number' | 'carrier'>>({
    name: 'messages_line_head',
    text: `SELECT m.id, m.account_id, m.from_number, m.to_number, m.carrier FROM messages m
            WHERE m.dispatch_rank IS NOT NULL AND m.dispatched_at IS NULL AND m.carrier <> ALL ($2::text[])
              AND NOT EXISTS (SELECT 1 FROM number_pace p
                               WHERE p.carrier = m.carrier AND p.number = m.from_number
                                 AND p.next_at > clock_timestamp() + make_interval(secs => $3::float8 / 1000))
            ORDER BY m.dispatch_rank, m.id
            LIMIT $1
            FOR UPDATE OF m SKIP LOCKED`,
    values: [limit, held, paceAheadMs],
  });
  return rows;
}

/**
 * Clears claimed messages to go to the carrier, as messageClearForDispatch does
 * one (call it under the pairs' shared locks): stamps dispatched_at, in the order
 * given (a microsecond apart, so the line's order is the order they left it), and
 * a lease until `leaseUntil`, unless the recipient opted out. The rows cleared.
 */
export async function messagesClearForDispatch(
  tx: Tx,
  ids: readonly string[],
  leaseUntil: Date,
): Promise<MessageRow[]> {
  if (ids.length === 0) return [];
  const { rows } = await tx.query<MessageRow>({
    name: 'messages_clear_for_dispatch',
    text: `UPDATE messages m SET dispatched_at = (SELECT clock_timestamp()) + c.ord * interval '1 microsecond',
                                 dispatch_lease_until = $2
             FROM unnest($1::text[]) WITH ORDINALITY AS c (id, ord)
            WHERE m.id = c.id AND m.status = 'queued' AND m.dispatched_at IS NULL
              AND NOT EXISTS (
                SELECT 1 FROM opt_outs o
                 WHERE o.account_id = m.account_id AND o.number = m.from_number AND o.recipient = m.to_number
                   AND o.deleted_at IS NULL)
            RETURNING ${M_COLUMNS}`,
    values: [ids, leaseUntil],
  });
  return rows;
}

/**
 * Leases that ran out (their dispatcher died or was cut off mid-batch): released,
 * at most `limit`; the rows back are the messages still queued, for a dispatch
 * job each.
 */
export async function messagesLeaseExpired(tx: Tx, now: Date, limit: number): Promise<MessageRow[]> {
  const { rows } = await tx.query<MessageRow>({
    name: 'messages_lease_expired',
    text: `UPDATE messages SET dispatch_lease_until = NULL
            WHERE id IN (SELECT id FROM messages WHERE dispatch_lease_until < $1
                          ORDER BY dispatch_lease_until LIMIT $2 FOR UPDATE SKIP LOCKED)
              AND dispatch_lease_until < $1
            RETURNING ${MESSAGE_COLUMNS}`,
    values: [now, limit],
  });
  return rows.filter((r) => r.status === 'queued');
}

/**
 * Extends the dispatch leases a live dispatcher still holds: queued, and not run
 * out by `now` (one that has is the sweep's, for a job). Returns the ids renewed.
 */
export async function messagesLeaseRenew(db: Db, ids: readonly string[], until: Date, now: Date): Promise<string[]> {
  if (ids.length === 0) return [];
  const { rows } = await db.query<{ id: string }>({
    name: 'messages_lease_renew',
    text: `UPDATE messages SET dispatch_lease_until = $2
            WHERE id = ANY ($1::text[]) AND status = 'queued' AND dispatch_lease_until >= $3
            RETURNING id`,
    values: [ids, until, now],
  });
  return rows.map((r) => r.id);
}

/**
 * Back to its place in the line (its rank was kept), to be cleared and claimed
 * again: its carrier asked us to slow down, and nothing of it was taken.
 */
export async function messageReturnToLine(db: Db, id: string): Promise<void> {
  await db.query({
    name: 'message_return_to_line',
    text: `UPDATE messages SET dispatched_at = NULL, dispatch_lease_until = NULL
            WHERE id = $1 AND status = 'queued' AND dispatch_rank IS NOT NULL`,
    values: [id],
  });
}

/**
 * queued → failed as `code` for messages still in the dispatch line (never handed
 * to a carrier) whose validity ended by `now`: at most `limit`, the rows changed.
 */
export async function messagesExpireInLine(tx: Tx, code: string, now: Date, limit: number): Promise<MessageRow[]> {
  const { rows } = await tx.query<MessageRow>({
    name: 'messages_expire_in_line',
    text: `UPDATE messages SET status = 'failed', error_code = $1, completed_at = $2, sequence = sequence + 1,
                               dispatch_rank = NULL, dispatch_lease_until = NULL
            WHERE id IN (SELECT id FROM messages
                          WHERE expires_at <= $2 AND dispatch_rank IS NOT NULL AND dispatched_at IS NULL
                          ORDER BY expires_at LIMIT $3 FOR UPDATE SKIP LOCKED)
              AND status = 'queued' AND expires_at <= $2 AND dispatch_rank IS NOT NULL AND dispatched_at IS NULL
            RETURNING ${MESSAGE_COLUMNS}`,
    values: [code, now, limit],
  });
  return rows;
}

/** The message is no longer the dispatcher's to record (a job of its own carries it on). */
export async function messageLeaseRelease(tx: Tx, id: string): Promise<void> {
  await tx.query({
    name: 'message_lease_release',
    text: 'UPDATE messages SET dispatch_lease_until = NULL WHERE id = $1 AND dispatch_lease_until IS NOT NULL',
    values: [id],
  });
}

/**
 * scheduled → queued for every message whose send_at has come (at most `limit`,
 * the earliest first): each joins the dispatch line as if created now, an
 * account's in the order of their times, so a scheduled campaign falling due
 * interleaves with other accounts' messages instead of going ahead of them.
 */
export async function messagesClaimScheduled(tx: Tx, now: Date, limit: number): Promise<MessageRow[]> {
  const { rows } = await tx.query<MessageRow>({
    name: 'messages_claim_scheduled',
    text: `WITH due AS (
             SELECT id, account_id, send_at FROM messages
              WHERE status = 'scheduled' AND send_at <= $1
              ORDER BY send_at, id LIMIT $2 FOR UPDATE SKIP LOCKED),
           placed AS (
             SELECT id, least(${NEXT_RANK('account_id')}
                              + row_number() OVER (PARTITION BY account_id ORDER BY send_at, id) - 1,
                              ${MAX_PRIORITY})::smallint AS rank
               FROM due)
           UPDATE messages m SET status = 'queued', sequence = m.sequence + 1, dispatch_rank = p.rank
             FROM placed p
            WHERE m.id = p.id AND m.status = 'scheduled' AND m.send_at <= $1
            RETURNING ${M_COLUMNS}`,
    values: [now, limit],
  });
  return rows;
}

/** queued → sent with the carrier's id and its part count (when it said): the transition that bills. */
export async function messageMarkSent(
  tx: Tx,
  id: string,
  carrierMessageId: string,
  carrierSegments: number | null,
  at: Date,
): Promise<MessageRow | null> {
  const { rows } = await tx.query<MessageRow>({
    name: 'message_mark_sent',
    text: `UPDATE messages SET status = 'sent', carrier_message_id = $2, carrier_segments = $3, sent_at = $4,
                               sequence = sequence + 1, dispatch_rank = NULL, dispatch_lease_until = NULL
            WHERE id = $1 AND status = 'queued'
            RETURNING ${MESSAGE_COLUMNS}`,
    values: [id, carrierMessageId, carrierSegments, at],
  });
  return rows[0] ?? null;
}

/** queued → failed when the carrier refuses the send (nothing was sent, nothing is billed). */
export async function messageMarkRejected(tx: Tx, id: string, errorCode: string, at: Date): Promise<MessageRow | null> {
  const { rows } = await tx.query<MessageRow>({
    name: 'message_mark_rejected',
    text: `UPDATE messages SET status = 'failed', error_code = $2, completed_at = $3, sequence = sequence + 1,
                               dispatch_rank = NULL, dispatch_lease_until = NULL
            WHERE id = $1 AND status = 'queued'
            RETURNING ${MESSAGE_COLUMNS}`,
    values: [id, errorCode, at],
  });
  return rows[0] ?? null;
}

export async function messageCancel(tx: Tx, accountId: string, id: string, at: Date): Promise<MessageRow | null> {
  const { rows } = await tx.query<MessageRow>({
    name: 'message_cancel',
    text: `UPDATE messages SET status = 'canceled', completed_at = $3, sequence = sequence + 1
            WHERE id = $1 AND account_id = $2 AND status = 'scheduled'
            RETURNING ${MESSAGE_COLUMNS}`,
    values: [id, accountId, at],
  });
  return rows[0] ?? null;
}

/**
 * sent → delivered | failed, for the message the carrier knows by `carrierMessageId`:
 * the receipt's transition in one statement, with no lookup before it. The first
 * terminal word from the carrier wins; nothing moves a message after it.
 *
 * The row is found by its carrier key alone: the guard is written through
 * `coalesce`, which no index serves. A bare `status = 'sent'` beside the key let
 * the planner, on statistics from before a campaign (none sent), walk the partial
 * index of sent messages, every message in flight, for each receipt. The UPDATE
 * judges the guard on the row's latest version once it holds the row, so no lock
 * step comes first (one would cost every receipt a WAL record of its own). Unnamed,
 * so it is planned at each run: a plan kept from when the table was small scans all
 * of it.
 */
export async function messageFinalize(
  tx: Tx,
  carrier: string,
  carrierMessageId: string,
  status: 'delivered' | 'failed',
  errorCode: string | null,
  at: Date,
): Promise<MessageRow | null> {
  const { rows } = await tx.query<MessageRow>({
    text: `UPDATE messages SET status = $3, error_code = $4, completed_at = $5, sequence = sequence + 1
            WHERE carrier = $1 AND carrier_message_id = $2 AND coalesce(status, '') = 'sent'
            RETURNING ${MESSAGE_COLUMNS}`,
    values: [carrier, carrierMessageId, status, errorCode, at],
  });
  return rows[0] ?? null;
}

/**
 * Sent messages still without a terminal receipt, waiting longer than `after`
 * since they were sent, that the carrier has not been asked about since (each
 * asked again only after as long again as it had waited when last asked, so a
 * message the carrier never finalizes costs a handful of lookups, not one per
 * interval). Oldest first; Telnyx keeps messages for 10 days.
 */
export async function messagesAwaitingReceipt(
  db: Db,
  now: Date,
  afterMs: number,
  limit: number,
): Promise<MessageRow[]> {
  const { rows } = await db.query<MessageRow>({
    name: 'messages_awaiting_receipt',
    text: `SELECT ${MESSAGE_COLUMNS} FROM messages
            WHERE status = 'sent' AND sent_at < $1::timestamptz - make_interval(secs => $2::float8 / 1000)
              AND sent_at > $1::timestamptz - interval '10 days'
              AND (checked_at IS NULL OR checked_at < $1::timestamptz - (checked_at - sent_at))
            ORDER BY sent_at LIMIT $3`,
    values: [now, afterMs, limit],
  });
  return rows;
}

/**
 * Records that the carrier was asked about the message (bookkeeping for
 * reconciliation, not its status). Found by key alone, its guard through
 * `coalesce`, as messageFinalize is, and for the same reason.
 */
export async function messageMarkChecked(db: Db, id: string, at: Date): Promise<void> {
  await db.query({
    text: `UPDATE messages SET checked_at = $2 WHERE id = $1 AND coalesce(status, '') = 'sent'`,
    values: [id, at],
  });
}

/**
 * queued → queued from its fallback number, through the fallback's carrier:
 * once, and only from the carrier it was on (`from`). What it left is kept.
 */
export async function messageFailOver(tx: Tx, id: string, from: string, reason: string): Promise<MessageRow | null> {
  const { rows } = await tx.query<MessageRow>({
    name: 'message_fail_over',
    text: `UPDATE messages SET failed_over_from = from_number, failed_over_carrier = carrier,
                               from_number = fallback_from, carrier = fallback_carrier, failover_reason = $3
            WHERE id = $1 AND status = 'queued' AND carrier = $2 AND failover_reason IS NULL
              AND fallback_carrier IS NOT NULL
            RETURNING ${MESSAGE_COLUMNS}`,
    values: [id, from, reason.slice(0, 500)],
  });
  return rows[0] ?? null;
}

/** Every request the message made of a carrier (or chose not to make), oldest first. */
export async function messageSendsOf(db: Db, messageId: string): Promise<SendRow[]> {
  const { rows } = await db.query<SendRow>({
    name: 'message_sends_of',
    text: `SELECT ${SEND_COLUMNS} FROM message_sends WHERE message_id = $1 ORDER BY id`,
    values: [messageId],
  });
  return rows;
}

/** Records a request about to be made (`pending`), or one not made (`not_accepted`: the carrier was down). */
export async function messageSendRecord(
  db: Db,
  s: {
    messageId: string;
    carrier: string;
    from: string;
    outcome: 'pending' | 'not_accepted';
    detail?: string;
    at: Date;
  },
): Promise<string> {
  const { rows } = await db.query<{ id: string }>({
    name: 'message_send_record',
    text: `INSERT INTO message_sends (message_id, carrier, from_number, outcome, detail, started_at, settled_at)
           VALUES ($1, $2, $3, $4::text, $5, $6::timestamptz, CASE WHEN $4::text = 'pending' THEN NULL ELSE $6::timestamptz END)
           RETURNING id::text`,
    values: [s.messageId, s.carrier, s.from, s.outcome, s.detail ?? null, s.at],
  });
  return rows[0]!.id;
}

/**
 * Settles requests whose outcome was open (pending, or unknown): what the carrier
 * answered, or what asking it later showed. A settled request is not reopened.
 */
export async function messageSendSettle(
  db: Db,
  ids: readonly string[],
  outcome: Exclude<SendOutcome, 'pending'>,
  detail: string,
  at: Date,
  carrierMessageId: string | null = null,
): Promise<void> {
  if (ids.length === 0) return;
  await db.query({
    name: 'message_send_settle',
    text: `UPDATE message_sends SET outcome = $2, settled_at = $4,
                  detail = CASE WHEN detail IS NULL THEN $3::text ELSE detail || '; ' || $3::text END,
                  carrier_message_id = coalesce($5, carrier_message_id)
            WHERE id = ANY ($1::bigint[]) AND outcome IN ('pending', 'unknown')`,
    values: [ids, outcome, detail.slice(0, 500), at, carrierMessageId],
  });
}

export interface HistoryEntry {
  messageId: string;
  source: HistorySource;
  /** The carrier the word came from or is about. */
  carrier?: string | null;
  carrierEventId?: string | null;
  status: string;
  carrierStatus?: string | null;
  errorCode?: string | null;
  effect: HistoryEffect;
  note?: string | null;
  occurredAt: Date;
}

export async function historyRecord(tx: Tx, h: HistoryEntry): Promise<void> {
  await tx.query({
    name: 'message_history_record',
    text: `INSERT INTO message_status_history (message_id, source, carrier_event_id, status, carrier_status, error_code, effect, note, occurred_at, carrier)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
    values: [
      h.messageId,
      h.source,
      h.carrierEventId ?? null,
      h.status,
      h.carrierStatus ?? null,
      h.errorCode ?? null,
      h.effect,
      h.note ?? null,
      h.occurredAt,
      h.carrier ?? null,
    ],
  });
}

/** The first entry of each message just created, in one statement. */
export async function historyRecordCreated(
  tx: Tx,
  ms: readonly Pick<MessageRow, 'id' | 'carrier' | 'status'>[],
  occurredAt: Date,
): Promise<void> {
  if (ms.length === 0) return;
  await tx.query({
    name: 'message_history_record_created',
    text: `INSERT INTO message_status_history (message_id, source, carrier, status, effect, occurred_at)
           SELECT m.id, 'api', m.carrier, m.status, 'applied', $4 FROM unnest($1::text[], $2::text[], $3::text[]) AS m (id, carrier, status)`,
    values: [ms.map((m) => m.id), ms.map((m) => m.carrier), ms.map((m) => m.status), occurredAt],
  });
}

export async function historyList(db: Db, messageId: string): Promise<HistoryRow[]> {
  const { rows } = await db.query<HistoryRow>({
    name: 'message_history_list',
    text: `SELECT ${HISTORY_COLUMNS} FROM message_status_history WHERE message_id = $1
            ORDER BY occurred_at, created_at, id`,
    values: [messageId],
  });
  return rows;
}
