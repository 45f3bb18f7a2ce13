// Messages as customers see them: creating one or a batch (validated, refused to an
// opted-out recipient, segmented, and committed together with its dispatch job), canceling a scheduled one, and the
// resource shape shared by the API and the customer events.

import type { DispatchMode } from '../config.js';
import type { Tx } from '../db/tx.js';
import { isRefusal, type Refusal, refuse } from '../api/refusal.js';
import { enqueueMany, removeJob } from '../jobs/enqueue.js';
import { jobKeys } from '../jobs/keys.js';
import { numbersOwned, type PhoneNumberRow } from '../numbers/numbers.sql.js';
import { optOutsActive, pairOf } from '../optouts/optouts.sql.js';
import { emit } from '../outbox/outbox.js';
import {
  historyRecord,
  historyRecordCreated,
  messageCancel,
  messagesInsertOutbound,
  type MessageRow,
  type NewOutbound,
} from './messages.sql.js';
import { notifyLine } from './dispatcher.js';
import { mediaUrlProblem } from './media.js';
import { segmentsOf } from './segments.js';

export const MAX_BODY_CHARACTERS = 1600;
export const MAX_SCHEDULE_DAYS = 35;
/** The longest validity period a message may ask for (a day). */
export const MAX_VALIDITY_SECONDS = 86_400;

export function messageResource(m: MessageRow) {
  return {
    id: m.id,
    direction: m.direction,
    from: m.from_number,
    to: m.to_number,
    body: m.body,
    media_urls: m.media_urls,
    status: m.status,
    encoding: m.encoding,
    segments: m.segments,
    carrier_segments: m.carrier_segments,
    error_code: m.error_code,
    carrier: m.carrier,
    carrier_message_id: m.carrier_message_id,
    fallback_from: m.fallback_from,
    failover:
      m.failover_reason !== null && m.failed_over_carrier !== null && m.failed_over_from !== null
        ? { carrier: m.failed_over_carrier, from: m.failed_over_from, reason: m.failover_reason }
        : null,
    tenant_id: m.tenant_id,
    send_at: m.send_at?.toISOString() ?? null,
    expires_at: m.expires_at?.toISOString() ?? null,
    created_at: m.created_at.toISOString(),
    sent_at: m.sent_at?.toISOString() ?? null,
    completed_at: m.completed_at?.toISOString() ?? null,
    sequence: m.sequence,
  };
}

export interface NewMessage {
  accountId: string;
  from: string;
  to: string;
  body: string | null;
  mediaUrls: string[];
  sendAt: Date | null;
  /** Another number of the account, on another carrier, to send from when the first carrier certainly did not take it. */
  fallbackFrom?: string | null;
  /** Seconds from send_at (or now) within which it must leave for the carrier, else it fails as expired. */
  validityPeriod?: number | null;
}

/**
 * Creates an outbound message, status `queued` (or `scheduled` with send_at), in
 * the caller's transaction, with a word to the dispatchers (batched) or its
 * dispatch job (run at send_at). It goes out
 * through the carrier its from-number belongs to.
 */
export async function createMessage(
  tx: Tx,
  m: NewMessage,
  now: Date,
  dispatch: DispatchMode,
): Promise<MessageRow | Refusal> {
  return (await createMessages(tx, m.accountId, [m], now, dispatch))[0]!;
}

/**
 * createMessage for many messages of one account in the caller's transaction:
 * each is refused or created as it would be alone (a refusal in its place), with
 * a handful of statements whatever their number — the account's numbers, the
 * opt-outs, the messages, their history and their jobs are each read or written
 * in one.
 */
export async function createMessages(
  tx: Tx,
  accountId: string,
  ms: readonly Omit<NewMessage, 'accountId'>[],
  now: Date,
  dispatch: DispatchMode,
): Promise<(MessageRow | Refusal)[]> {
  const results: (MessageRow | Refusal | null)[] = ms.map((m) => inputProblem(m, now));
  const numbers = await numbersOwned(
    tx,
    accountId,
    ms.flatMap((m, i) => (results[i] ? [] : [m.from, ...(m.fallbackFrom ? [m.fallbackFrom] : [])])),
  );
  const senders = ms.map((m, i) => {
    if (results[i]) return null;
    const sender = senderOf(m, numbers);
    if (isRefusal(sender)) {
      results[i] = sender;
      return null;
    }
    return sender;
  });
  // A STOP that lands after this check is caught by the dispatcher, which checks again under the pair's lock.
  const optedOut = await optOutsActive(
    tx,
    accountId,
    ms.flatMap((m, i) => (senders[i] ? [{ number: m.from, recipient: m.to }] : [])),
  );
  const creating: number[] = [];
  const rows: NewOutbound[] = [];
  for (const [i, m] of ms.entries()) {
    const sender = senders[i];
    if (!sender) continue;
    if (optedOut.has(pairOf({ number: m.from, recipient: m.to }))) {
      results[i] = refuse(
        'recipient_opted_out',
        `${m.to} opted out of messages from ${m.from}; they can opt back in by texting START to it`,
        'to',
      );
      continue;
    }
    creating.push(i);
    rows.push({
      accountId,
      tenantId: sender.number.tenant_id,
      from: m.from,
      to: m.to,
      body: m.body,
      mediaUrls: m.mediaUrls,
      ...segmentsOf(m.body, m.mediaUrls),
      sendAt: m.sendAt,
      carrier: sender.number.carrier,
      fallback: sender.fallback,
      validitySeconds: m.validityPeriod ?? null,
    });
  }
  const made = await messagesInsertOutbound(tx, accountId, rows);
  await historyRecordCreated(tx, made, now);
  if (dispatch === 'batched') {
    // The dispatchers take them from the line (a scheduled one joins it at its send_at).
    if (made.some((message) => !message.send_at)) await notifyLine(tx);
  } else
    await enqueueMany(
      tx,
      'message.dispatch',
      made.map((message) => ({
        payload: { messageId: message.id },
        opts: {
          jobKey: jobKeys.dispatch(message.id),
          // Its place in the dispatch line: every account's next message is taken before anyone's following one.
          priority: message.dispatch_rank ?? 0,
          ...(message.send_at ? { runAt: message.send_at } : {}),
        },
      })),
    );
  for (const [k, i] of creating.entries()) results[i] = made[k]!;
  return results as (MessageRow | Refusal)[];
}

/** What is wrong with a message's own fields, before anything is looked up. */
function inputProblem(m: Omit<NewMessage, 'accountId'>, now: Date): Refusal | null {
  if (!m.body && m.mediaUrls.length === 0) return refuse('empty_message', 'Give a body, media_urls, or both', 'body');
  for (const [i, url] of m.mediaUrls.entries()) {
    const problem = mediaUrlProblem(url);
    if (problem) return refuse('invalid_media_url', `media_urls.${i}: ${problem}`, `media_urls.${i}`);
  }
  if (m.sendAt) {
    if (m.sendAt.getTime() <= now.getTime())
      return refuse('invalid_send_at', 'send_at must be in the future', 'send_at');
    if (m.sendAt.getTime() > now.getTime() + MAX_SCHEDULE_DAYS * 86_400_000) {
      return refuse('invalid_send_at', `send_at must be at most ${MAX_SCHEDULE_DAYS} days ahead`, 'send_at');
    }
  }
  return null;
}

/** The account's number a message goes from, and its fallback on another carrier, or why not. */
function senderOf(
  m: Omit<NewMessage, 'accountId'>,
  numbers: ReadonlyMap<string, PhoneNumberRow>,
): { number: PhoneNumberRow; fallback: { from: string; carrier: string } | null } | Refusal {
  const number = numbers.get(m.from);
  if (!number) return refuse('from_not_owned', `${m.from} is not one of this account's phone numbers`, 'from');
  if (!m.fallbackFrom) return { number, fallback: null };
  const other = numbers.get(m.fallbackFrom);
  if (!other || other.carrier === number.carrier) {
    return refuse(
      'invalid_fallback',
      other
        ? `${m.fallbackFrom} is on ${other.carrier}, the carrier of ${m.from}: a fallback must be on another carrier`
        : `${m.fallbackFrom} is not one of this account's phone numbers`,
      'fallback_from',
    );
  }
  return { number, fallback: { from: other.number, carrier: other.carrier } };
}

/** scheduled → canceled, with one message.canceled; null when it is no longer scheduled. */
export async function cancelMessage(tx: Tx, accountId: string, id: string, now: Date): Promise<MessageRow | null> {
  const m = await messageCancel(tx, accountId, id, now);
  if (!m) return null;
  await historyRecord(tx, { messageId: m.id, source: 'api', status: 'canceled', effect: 'applied', occurredAt: now });
  await emit(tx, {
    accountId: m.account_id,
    tenantId: m.tenant_id,
    type: 'message.canceled',
    subjectId: m.id,
    data: messageResource(m),
    occurredAt: now,
  });
  // The dispatch job would find nothing to send; remove it rather than let it run.
  await removeJob(tx, jobKeys.dispatch(m.id));
  return m;
}
