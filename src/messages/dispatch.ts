// The dispatch job: hands an outbound message to its carrier, then records what
// the carrier said in one transaction. queued → sent (bill the parts, history,
// message.sent) only if the guarded UPDATE changed a row; a carrier 4xx makes it
// failed the same way (message.failed, nothing billed). Before the carrier is
// called, the message is cleared against the opt-out list under the pair's lock:
// a recipient who opted out since it was created (a scheduled message, a STOP
// racing the send) fails it as recipient_opted_out, and the carrier never hears of
// it. A carrier refusal because the recipient opted out at the carrier fails the
// message the same way and records the opt-out.
//
// An unknown outcome — no answer, a timeout after sending, a cut connection, a
// 5xx, our own transaction failing after the carrier's 2xx (the job then runs
// again) — is never turned into failed on its own while the carrier could still
// tell us, and never into a second message:
// - a carrier that honours an Idempotency-Key (Telnyx) is asked again with the
//   message id as the key and the same bytes, and answers with the first send;
//   past its replay window the message fails with carrier_outcome_unknown;
// - a carrier that does not (Twilio) is never asked to send again before it shows
//   it has no such message: a request is recorded (message_sends, `pending`)
//   before it is made, and a send left open is looked for first, in the
//   callbacks that hand back our message id and in the carrier's own list of
//   messages from that number to that recipient; found, it is the message's; not
//   found, it was not taken, and is sent.
//
// Failover. A message with a fallback number (on another carrier) moves to it,
// once, when — and only when — its carrier certainly did not take it: every
// request to it never reached it or was answered as not processed, or the
// carrier is marked down (carrier/health.ts: no request is then made). An open
// request (pending, unknown) forbids it until the carrier's own answer settles
// it. The message's from and carrier then name what sent it, its history says
// why, and it is billed and announced once, by the transition that applies.
// A re-run after the commit finds `sent` and sends nothing.

import type pg from 'pg';
import { bill } from '../billing/usage.sql.js';
import type { CarrierClient, CommandResult } from '../carrier/carrier.js';
import {
  carrierGate,
  DEFAULT_HEALTH,
  DEFAULT_THROTTLE_MS,
  type HealthSettings,
  noteAnswer,
} from '../carrier/health.js';
import { carrierEventSubjectsMarked } from '../carrier/events.sql.js';
import { type Carriers, carrierNamed, clientOf } from '../carrier/registry.js';
import { withTx } from '../db/tx.js';
import { enqueue } from '../jobs/enqueue.js';
import { jobKeys } from '../jobs/keys.js';
import { decideRetry, type RetryPolicy } from '../jobs/retry.js';
import type { TaskHandler } from '../jobs/runner.js';
import { emit } from '../outbox/outbox.js';
import type { Logger } from '../telemetry/log.js';
import type { Tx } from '../db/tx.js';
import { numberOwned } from '../numbers/numbers.sql.js';
import { optOut } from '../optouts/optouts.js';
import { optOutActive, pairLockShared } from '../optouts/optouts.sql.js';
import { messageResource } from './messages.js';
import {
  historyRecord,
  messageById,
  messageByCarrierId,
  messageClaimScheduled,
  messageClearForDispatch,
  messageFailOver,
  messageLeaseRelease,
  messageMarkRejected,
  messageMarkSent,
  type MessageRow,
  messageSendRecord,
  messageSendSettle,
  messageSendsOf,
  type SendRow,
} from './messages.sql.js';

export interface DispatchDeps {
  pool: pg.Pool;
  /** The message's own carrier sends it. */
  carriers: Carriers;
  log: Logger;
  /** How a send whose outcome we do not know is retried (jobs/retry.ts). */
  policy: RetryPolicy;
  /** When a carrier is marked down and probed again (carrier/health.ts); DEFAULT_HEALTH by default. */
  health?: HealthSettings;
  /** The clock; a parameter so tests move time instead of sleeping. */
  now?: () => Date;
}

export type DispatchOutcome =
  | 'sent'
  | 'rejected'
  | 'retrying'
  | 'gave_up'
  | 'not_due'
  /** A scheduled message that fell due, put in the dispatch line. */
  | 'in_line'
  /** Its carrier is marked down and it cannot fail over: it waits for the carrier's probe. */
  | 'waiting'
  | 'nothing_to_send';

export const OUTCOME_UNKNOWN = 'carrier_outcome_unknown';
export const OPTED_OUT = 'recipient_opted_out';
/** Its validity period ended before it could leave for the carrier. */
export const EXPIRED = 'expired';

/**
 * How long after a request whose outcome is unknown a carrier without idempotent
 * sends is first searched for it: its list of messages shows a new one a moment
 * after the create, and its first callback comes about as soon.
 */
export const SEARCH_AFTER_MS = 5_000;
/** The search starts this long before the first open request (the carrier's clock against ours). */
const SEARCH_SLACK_MS = 60_000;

const pairOf = (m: MessageRow) => ({ accountId: m.account_id, number: m.from_number, recipient: m.to_number });

export async function dispatchMessage(deps: DispatchDeps, messageId: string, attempt = 1): Promise<DispatchOutcome> {
  const now = deps.now ?? (() => new Date());
  const m = await messageById(deps.pool, messageId);
  if (!m || (m.status !== 'queued' && m.status !== 'scheduled')) return 'nothing_to_send';

  if (m.status === 'scheduled') {
    const start = now();
    if (m.send_at && m.send_at > start) {
      // Early (clock skew between us and the database, or a job re-run): wait for
      // send_at, at least a second, so a skewed clock cannot make the job spin.
      const runAt = new Date(Math.max(m.send_at.getTime(), start.getTime() + 1000));
      await withTx(deps.pool, (tx) =>
        enqueue(tx, 'message.dispatch', { messageId }, { runAt, jobKey: jobKeys.dispatch(messageId) }),
      );
      return 'not_due';
    }
    // Claim it first: once queued, a cancel is refused, so we never send a canceled message.
    // Then it joins the dispatch line and takes its turn as if created now, always
    // by a job of its own: sent at once, a scheduled campaign's messages would each
    // find their account's line empty and all go out ahead of other accounts' messages.
    const claimed = await withTx(deps.pool, async (tx) => {
      const row = await messageClaimScheduled(tx, messageId, start);
      const turn = { runAt: start, jobKey: jobKeys.dispatch(messageId), priority: row?.dispatch_rank ?? 0 };
      if (row) await enqueue(tx, 'message.dispatch', { messageId }, turn);
      return row;
    });
    return claimed ? 'in_line' : 'nothing_to_send';
  }

  const cleared = await withTx(deps.pool, async (tx): Promise<MessageRow | DispatchOutcome> => {
    await pairLockShared(tx, pairOf(m));
    const row = await messageClearForDispatch(tx, messageId);
    if (row) return row;
    const failed = await fail(tx, messageId, OPTED_OUT, 'the recipient opted out of messages from this number', now());
    return failed ? 'rejected' : 'nothing_to_send';
  });
  if (typeof cleared === 'string') return cleared;
  return sendThrough(deps, cleared, attempt);
}

/**
 * Where a send the carrier took is recorded: by default at once, in a transaction
 * of its own; the batched dispatcher records many in one (dispatcher.ts).
 */
export type RecordSent = (
  m: MessageRow,
  carrierMessageId: string,
  parts: number | null,
  settles: string[],
  found: string | null,
) => Promise<DispatchOutcome>;

/**
 * A batch's hold on a message it took from the line (dispatcher.ts): where what the
 * carrier took is recorded, and how the message goes back to its place in the line
 * when its carrier asks us to slow down (nothing of it was taken).
 */
export interface Hand {
  record: RecordSent;
  putBack(m: MessageRow): Promise<void>;
  /** Waits for the message's turn (its number's pace) right before each request. */
  turn?(): Promise<void>;
}

/** Sends a cleared, queued message through its carrier, failing over once when it may. */
export async function sendThrough(
  deps: DispatchDeps,
  first: MessageRow,
  attempt: number,
  hand?: Hand,
): Promise<DispatchOutcome> {
  const now = deps.now ?? (() => new Date());
  const record: RecordSent = hand?.record ?? ((...a) => markSent(deps, ...a));
  /** The carrier said "slow down", or still waits for its wait to end: nothing was taken, nothing fails. */
  const slowDown = async (m: MessageRow, until: Date, open: SendRow[]): Promise<DispatchOutcome> => {
    if (hand && open.length === 0) {
      await hand.putBack(m);
      return 'in_line';
    }
    await later(deps, m, attempt, until);
    return 'waiting';
  };
  let m = first;
  for (;;) {
    const client = clientOf(deps.carriers, m.carrier);
    // Requests are recorded before they are made when the carrier cannot de-duplicate
    // a repeat, or when the message may fail over (which needs to know none was taken).
    const careful = m.fallback_carrier !== null || !client.idempotentSends;
    const sends = careful ? await messageSendsOf(deps.pool, m.id) : [];
    const open = sends.filter((x) => x.carrier === m.carrier && (x.outcome === 'pending' || x.outcome === 'unknown'));

    if (open.length > 0 && !client.idempotentSends) {
      const found = await lookFor(deps, m, client, open, attempt);
      if (found !== 'none') return found;
      open.length = 0;
    }

    const gate = await carrierGate(deps.pool, m.carrier, now(), deps.health ?? DEFAULT_HEALTH);
    if (!gate.open && gate.throttled) return slowDown(m, gate.until, open);
    if (!gate.open) {
      if (await mayFailOver(deps, m, open)) {
        await messageSendRecord(deps.pool, {
          messageId: m.id,
          carrier: m.carrier,
          from: m.from_number,
          outcome: 'not_accepted',
          detail: `no request made: ${gate.why}`,
          at: now(),
        });
        const moved = await failOver(deps, m, gate.why);
        if (typeof moved === 'string') return moved;
        m = moved;
        continue;
      }
      await later(deps, m, attempt, gate.until);
      return 'waiting';
    }

    const pending = careful
      ? await messageSendRecord(deps.pool, {
          messageId: m.id,
          carrier: m.carrier,
          from: m.from_number,
          outcome: 'pending',
          at: now(),
        })
      : null;
    await hand?.turn?.();
    // Taken from the line with nothing of it taken yet: past its validity it fails instead of going.
    if (hand && open.length === 0 && m.expires_at && m.expires_at <= now()) {
      const at = now();
      return withTx(deps.pool, async (tx) => {
        await messageSendSettle(tx, pending ? [pending] : [], 'not_accepted', 'no request made: expired', at);
        const failed = await fail(tx, m.id, EXPIRED, 'its validity period ended before it could be sent', at);
        return failed ? 'rejected' : 'nothing_to_send';
      });
    }
    const result = await client.sendMessage({
      from: m.from_number,
      to: m.to_number,
      text: m.body,
      mediaUrls: m.media_urls,
      idempotencyKey: m.id,
    });
    await noteAnswer(deps.pool, m.carrier, result, now(), deps.health ?? DEFAULT_HEALTH).catch((err: Error) =>
      deps.log.warn({ carrier: m.carrier, err: err.message }, 'could not note the carrier’s health'),
    );
    // This request, and for a carrier that replays a repeated key, the open ones it answers for too.
    const settles = [...(pending ? [pending] : []), ...(client.idempotentSends ? open.map((x) => x.id) : [])];

    if (result.ok) return record(m, result.carrierMessageId, result.parts, settles, null);

    if (result.kind === 'rejected') {
      const at = now();
      const optedOut = result.reason === 'recipient_opted_out';
      return withTx(deps.pool, async (tx) => {
        await messageSendSettle(tx, settles, 'rejected', `${result.code}: ${result.detail}`, at);
        const failed = await fail(tx, m.id, optedOut ? OPTED_OUT : result.code, result.detail, at, m.carrier);
        if (!failed) return 'nothing_to_send';
        if (optedOut) await optOut(tx, { ...pairOf(failed), tenantId: failed.tenant_id, source: 'carrier' }, at);
        return 'rejected';
      });
    }

    if (pending) {
      await messageSendSettle(
        deps.pool,
        [pending],
        result.notAccepted ? 'not_accepted' : 'unknown',
        result.throttled ? `asked to slow down: ${result.detail}` : result.detail,
        now(),
      );
    }
    if (result.throttled) {
      // Not processed: no failover, no attempt counted; the same key and bytes go once the wait is over.
      return slowDown(m, new Date(now().getTime() + (result.retryAfterMs ?? DEFAULT_THROTTLE_MS)), open);
    }
    if (result.notAccepted && (await mayFailOver(deps, m, open))) {
      const moved = await failOver(deps, m, `${m.carrier} did not take the message (${result.detail})`);
      if (typeof moved === 'string') return moved;
      m = moved;
      continue;
    }
    return retry(deps, m, attempt, result, client);
  }
}

/**
 * A carrier without idempotent sends may have the message an open request made:
 * look for it before anything is sent again. Found: the message is sent with the
 * carrier's id. Not found: the open requests were not taken ('none').
 */
async function lookFor(
  deps: DispatchDeps,
  m: MessageRow,
  client: CarrierClient,
  open: SendRow[],
  attempt: number,
): Promise<DispatchOutcome | 'none'> {
  const now = (deps.now ?? (() => new Date()))();
  const latest = Math.max(...open.map((x) => x.started_at.getTime()));
  if (now.getTime() - latest < SEARCH_AFTER_MS) {
    await later(deps, m, attempt, new Date(latest + SEARCH_AFTER_MS));
    return 'retrying';
  }
  const ids = open.map((x) => x.id);
  // Its callbacks hand back our id: the carrier's word that it has the message.
  const adapter = carrierNamed(deps.carriers, m.carrier);
  const marked = await carrierEventSubjectsMarked(deps.pool, m.carrier, m.id, adapter.eventTypes('message.receipt'));
  for (const sid of marked) {
    if (!(await messageByCarrierId(deps.pool, m.carrier, sid))) {
      return markSent(deps, m, sid, null, ids, `${m.carrier} has it: a callback for it came (${sid})`);
    }
  }
  const since = new Date(Math.min(...open.map((x) => x.started_at.getTime())) - SEARCH_SLACK_MS);
  const search = client.findSent
    ? await client.findSent({ from: m.from_number, to: m.to_number, text: m.body, mediaUrls: m.media_urls, since })
    : ({ ok: false, kind: 'retry', detail: `${m.carrier} cannot be searched` } as const);
  if (!search.ok) {
    deps.log.warn({ messageId: m.id, detail: search.detail }, 'could not look for a send whose outcome is unknown');
    await later(deps, m, attempt + 1, new Date(now.getTime() + SEARCH_AFTER_MS));
    return 'retrying';
  }
  // Oldest first; a message of ours already holding an id is not this one.
  for (const f of [...search.found].sort((a, b) => a.createdAt.getTime() - b.createdAt.getTime())) {
    if (await messageByCarrierId(deps.pool, m.carrier, f.carrierMessageId)) continue;
    return markSent(deps, m, f.carrierMessageId, f.parts, ids, `${m.carrier} lists it (${f.carrierMessageId})`);
  }
  await messageSendSettle(
    deps.pool,
    ids,
    'not_accepted',
    `${m.carrier} shows no such message (its callbacks and its list since ${since.toISOString()})`,
    now,
  );
  return 'none';
}

/** queued → sent with the carrier's id: bill, history, message.sent; the requests that made it settled. */
async function markSent(
  deps: DispatchDeps,
  m: MessageRow,
  carrierMessageId: string,
  parts: number | null,
  settles: string[],
  found: string | null,
): Promise<DispatchOutcome> {
  const at = (deps.now ?? (() => new Date()))();
  return withTx(deps.pool, (tx) => recordSent(tx, m, carrierMessageId, parts, settles, found, at));
}

/** markSent's work in the caller's transaction (which may record many). */
export async function recordSent(
  tx: Tx,
  m: MessageRow,
  carrierMessageId: string,
  parts: number | null,
  settles: string[],
  found: string | null,
  at: Date,
): Promise<DispatchOutcome> {
  {
    await messageSendSettle(tx, settles, 'accepted', found ?? 'taken', at, carrierMessageId);
    const sent = await messageMarkSent(tx, m.id, carrierMessageId, parts, at);
    if (!sent) return 'nothing_to_send';
    // The carrier's count when it gave one: it is what the carrier charges for.
    await bill(tx, {
      accountId: sent.account_id,
      tenantId: sent.tenant_id,
      kind: sent.encoding === 'MMS' ? 'mms_outbound' : 'sms_segment_outbound',
      quantity: sent.carrier_segments ?? sent.segments,
      sourceId: sent.id,
      occurredAt: at,
    });
    const notes = [
      sent.failover_reason ? `sent from ${sent.from_number} after failing over from ${sent.failed_over_carrier}` : null,
      found,
    ].filter(Boolean);
    await historyRecord(tx, {
      messageId: sent.id,
      source: 'dispatch',
      carrier: sent.carrier,
      status: 'sent',
      effect: 'applied',
      note: notes.length > 0 ? notes.join('; ') : null,
      occurredAt: at,
    });
    await emit(tx, {
      accountId: sent.account_id,
      tenantId: sent.tenant_id,
      type: 'message.sent',
      subjectId: sent.id,
      data: messageResource(sent),
      occurredAt: at,
    });
    return 'sent';
  }
}

/**
 * Whether the message may move to its fallback now: it has one, has not moved,
 * its carrier certainly took none of its requests (no open one, every recorded
 * one not taken), and the fallback's carrier is configured.
 */
async function mayFailOver(deps: DispatchDeps, m: MessageRow, open: SendRow[]): Promise<boolean> {
  if (!m.fallback_carrier || m.failover_reason !== null || open.length > 0) return false;
  if (!deps.carriers.get(m.fallback_carrier)?.client) return false;
  const sends = await messageSendsOf(deps.pool, m.id);
  return sends.filter((x) => x.carrier === m.carrier).every((x) => x.outcome === 'not_accepted');
}

/**
 * Moves the message to its fallback number and carrier, in one transaction with
 * its history: the fallback must still be the account's, and its recipient is
 * cleared against the opt-out list of that number (a STOP to it fails the message).
 */
async function failOver(deps: DispatchDeps, m: MessageRow, reason: string): Promise<MessageRow | DispatchOutcome> {
  const at = (deps.now ?? (() => new Date()))();
  const to = { from: m.fallback_from!, carrier: m.fallback_carrier! };
  return withTx(deps.pool, async (tx) => {
    const number = await numberOwned(tx, m.account_id, to.from);
    const pair = { accountId: m.account_id, number: to.from, recipient: m.to_number };
    await pairLockShared(tx, pair);
    if (number?.carrier === to.carrier && (await optOutActive(tx, pair))) {
      const failed = await fail(
        tx,
        m.id,
        OPTED_OUT,
        `the recipient opted out of messages from ${to.from}`,
        at,
        m.carrier,
      );
      return failed ? 'rejected' : 'nothing_to_send';
    }
    const moved = number?.carrier === to.carrier ? await messageFailOver(tx, m.id, m.carrier, reason) : null;
    if (!moved) {
      // The fallback is no longer the account's (or the message moved meanwhile): it stays, and waits.
      deps.log.warn({ messageId: m.id, fallback: to.from }, 'could not fail over');
      return 'nothing_to_send';
    }
    await historyRecord(tx, {
      messageId: m.id,
      source: 'dispatch',
      carrier: m.carrier,
      status: 'queued',
      effect: 'applied',
      note: `failing over to ${to.carrier} (${to.from}): ${reason}`,
      occurredAt: at,
    });
    deps.log.info({ messageId: m.id, from: m.carrier, to: to.carrier, reason }, 'message failed over');
    return moved;
  });
}

/** The dispatch job again at `runAt`, in its place in the line. */
async function later(deps: DispatchDeps, m: MessageRow, attempt: number, runAt: Date): Promise<void> {
  await withTx(deps.pool, async (tx) => {
    await enqueue(
      tx,
      'message.dispatch',
      { messageId: m.id, attempt },
      { runAt, jobKey: jobKeys.dispatch(m.id), priority: m.dispatch_rank ?? 0 },
    );
    // A dispatcher's claim on it ends here: the job carries it on.
    await messageLeaseRelease(tx, m.id);
  });
}

/**
 * A send that may be repeated (an unknown outcome, or one certainly not taken by
 * a carrier it cannot fail over from): retried from when the message was due, for
 * as long as the carrier could still tell us; then failed as unknown.
 */
async function retry(
  deps: DispatchDeps,
  m: MessageRow,
  attempt: number,
  result: Extract<CommandResult<unknown>, { kind: 'retry' }>,
  client: CarrierClient,
): Promise<DispatchOutcome> {
  const at = (deps.now ?? (() => new Date()))();
  const next = decideRetry(deps.policy, {
    attempt,
    since: m.send_at ?? m.created_at,
    now: at,
    retryAfterMs: result.retryAfterMs,
  });
  if (!next.retry) {
    return withTx(deps.pool, async (tx) => {
      const failed = await fail(tx, m.id, OUTCOME_UNKNOWN, result.detail, at, m.carrier);
      return failed ? 'gave_up' : 'nothing_to_send';
    });
  }
  // An open request on a carrier without idempotent sends is looked for first, once it can be found.
  const runAt =
    !client.idempotentSends && !result.notAccepted
      ? new Date(Math.max(next.runAt.getTime(), at.getTime() + SEARCH_AFTER_MS))
      : next.runAt;
  deps.log.warn(
    { messageId: m.id, carrier: m.carrier, attempt, status: result.status, runAt, detail: result.detail },
    result.notAccepted
      ? 'carrier did not take the send; retrying'
      : 'carrier outcome unknown; asking again before any re-send',
  );
  await later(deps, m, attempt + 1, runAt);
  return 'retrying';
}

/** queued → failed, with its history and one message.failed; null when it was no longer queued. */
export async function fail(
  tx: Tx,
  messageId: string,
  code: string,
  note: string,
  at: Date,
  carrier: string | null = null,
): Promise<MessageRow | null> {
  const failed = await messageMarkRejected(tx, messageId, code, at);
  if (!failed) return null;
  await announceFailed(tx, failed, code, note, at, carrier);
  return failed;
}

/** The history and the one message.failed of a message a guarded statement just failed. */
export async function announceFailed(
  tx: Tx,
  failed: MessageRow,
  code: string,
  note: string,
  at: Date,
  carrier: string | null = null,
): Promise<void> {
  const messageId = failed.id;
  await historyRecord(tx, {
    messageId,
    source: 'dispatch',
    carrier,
    status: 'failed',
    errorCode: code,
    effect: 'applied',
    note,
    occurredAt: at,
  });
  await emit(tx, {
    accountId: failed.account_id,
    tenantId: failed.tenant_id,
    type: 'message.failed',
    subjectId: failed.id,
    data: messageResource(failed),
    occurredAt: at,
  });
}

export function dispatchTask(deps: DispatchDeps): TaskHandler<'message.dispatch'> {
  return async (payload) => {
    await dispatchMessage(deps, payload.messageId, payload.attempt ?? 1);
  };
}
