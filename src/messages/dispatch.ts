// The dispatch job: hands an outbound message to the carrier, then records what
// the carrier said in one transaction. queued → sent (bill the parts, history,
// message.sent) only if the guarded UPDATE changed a row; a carrier 4xx makes it
// failed the same way (message.failed, nothing billed). Before the carrier is
// called, the message is cleared against the opt-out list under the pair's lock:
// a recipient who opted out since it was created (a scheduled message, a STOP
// racing the send) fails it as recipient_opted_out, and the carrier never hears of
// it. A carrier refusal because the recipient opted out at the carrier fails the
// message the same way and records the opt-out.
//
// Every send carries the message id as its Idempotency-Key and the same bytes, so
// an outcome we could not learn — no answer, a timeout after sending, a cut
// connection, our own transaction failing after the carrier's 2xx (the job then
// runs again) — is retried with that key, and the carrier answers the retry with
// the first send instead of sending again. Such a message is never failed on its
// own while the carrier would still replay its answer; after that window it fails
// with carrier_outcome_unknown. A re-run after the commit finds `sent` and sends
// nothing.

import type pg from 'pg';
import { bill } from '../billing/usage.sql.js';
import { type Carriers, clientOf } from '../carrier/registry.js';
import { withTx } from '../db/tx.js';
import { enqueue } from '../jobs/enqueue.js';
import { jobKeys } from '../jobs/keys.js';
import { decideRetry, type RetryPolicy } from '../jobs/retry.js';
import type { TaskHandler } from '../jobs/runner.js';
import { emit } from '../outbox/outbox.js';
import type { Logger } from '../telemetry/log.js';
import type { Tx } from '../db/tx.js';
import { optOut } from '../optouts/optouts.js';
import { pairLockShared } from '../optouts/optouts.sql.js';
import { messageResource } from './messages.js';
import {
  historyRecord,
  messageById,
  messageClaimScheduled,
  messageClearForDispatch,
  messageMarkRejected,
  messageMarkSent,
  type MessageRow,
} from './messages.sql.js';

export interface DispatchDeps {
  pool: pg.Pool;
  /** The message's own carrier sends it. */
  carriers: Carriers;
  log: Logger;
  /** How a send whose outcome we do not know is retried (jobs/retry.ts). */
  policy: RetryPolicy;
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
  | 'nothing_to_send';

export const OUTCOME_UNKNOWN = 'carrier_outcome_unknown';
export const OPTED_OUT = 'recipient_opted_out';

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

  const refused = await withTx(deps.pool, async (tx): Promise<DispatchOutcome | null> => {
    await pairLockShared(tx, pairOf(m));
    if (await messageClearForDispatch(tx, messageId)) return null;
    const failed = await fail(tx, messageId, OPTED_OUT, 'the recipient opted out of messages from this number', now());
    return failed ? 'rejected' : 'nothing_to_send';
  });
  if (refused) return refused;

  const result = await clientOf(deps.carriers, m.carrier).sendMessage({
    from: m.from_number,
    to: m.to_number,
    text: m.body,
    mediaUrls: m.media_urls,
    idempotencyKey: m.id,
  });

  if (result.ok) {
    return withTx(deps.pool, async (tx) => {
      const at = now();
      const sent = await messageMarkSent(tx, messageId, result.carrierMessageId, result.parts, at);
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
      await historyRecord(tx, { messageId, source: 'dispatch', status: 'sent', effect: 'applied', occurredAt: at });
      await emit(tx, {
        accountId: sent.account_id,
        tenantId: sent.tenant_id,
        type: 'message.sent',
        subjectId: sent.id,
        data: messageResource(sent),
        occurredAt: at,
      });
      return 'sent';
    });
  }

  // Retried with the same key from when the message was due, for as long as the carrier replays answers.
  const at = now();
  const next =
    result.kind === 'retry'
      ? decideRetry(deps.policy, {
          attempt,
          since: m.send_at ?? m.created_at,
          now: at,
          retryAfterMs: result.retryAfterMs,
        })
      : null;
  if (next === null || !next.retry) {
    const optedOut = result.kind === 'rejected' && result.reason === 'recipient_opted_out';
    const code = result.kind === 'rejected' ? (optedOut ? OPTED_OUT : result.code) : OUTCOME_UNKNOWN;
    return withTx(deps.pool, async (tx) => {
      const failed = await fail(tx, messageId, code, result.detail, at);
      if (!failed) return 'nothing_to_send';
      if (optedOut) await optOut(tx, { ...pairOf(failed), tenantId: failed.tenant_id, source: 'carrier' }, at);
      return next === null ? 'rejected' : 'gave_up';
    });
  }

  deps.log.warn(
    { messageId, attempt, status: result.status, runAt: next.runAt, detail: result.detail },
    'carrier outcome unknown; retrying with the same key',
  );
  await withTx(deps.pool, (tx) =>
    enqueue(
      tx,
      'message.dispatch',
      { messageId, attempt: attempt + 1 },
      { runAt: next.runAt, jobKey: jobKeys.dispatch(messageId), priority: m.dispatch_rank ?? 0 },
    ),
  );
  return 'retrying';
}

/** queued → failed, with its history and one message.failed; null when it was no longer queued. */
async function fail(tx: Tx, messageId: string, code: string, note: string, at: Date): Promise<MessageRow | null> {
  const failed = await messageMarkRejected(tx, messageId, code, at);
  if (!failed) return null;
  await historyRecord(tx, {
    messageId,
    source: 'dispatch',
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
  return failed;
}

export function dispatchTask(deps: DispatchDeps): TaskHandler<'message.dispatch'> {
  return async (payload) => {
    await dispatchMessage(deps, payload.messageId, payload.attempt ?? 1);
  };
}
