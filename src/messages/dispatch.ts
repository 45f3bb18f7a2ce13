// The dispatch job: hands an outbound message to the carrier, then records what
// the carrier said in one transaction. queued → sent (bill the segments, history,
// message.sent) only if the guarded UPDATE changed a row; a carrier 4xx makes it
// failed the same way (message.failed, nothing billed); 429/5xx/no answer retry
// with backoff, honouring retry-after, by re-enqueueing this job.
//
// The send window. Telnyx has no idempotency key for messaging, so between the
// carrier accepting the message and our commit there is a window in which a
// crash loses the fact that it was sent. We keep it to one short transaction
// after the HTTP answer (everything it needs was loaded before the call). If a
// worker dies inside it, the message is still `queued`; the job is unlocked by
// the sweeper and runs again, and the carrier sends the message a second time
// (the recipient may get it twice; it is billed and announced once, and the first
// send's receipts match no message and are recorded as errors). We chose
// at-least-once over losing a message. The same happens when the carrier takes
// longer than the client timeout to answer: the request may have been accepted,
// and the retry sends again. A re-run after the commit finds `sent` and does nothing.

import type pg from 'pg';
import type { CarrierClient } from '../carrier/carrier.js';
import { bill } from '../billing/usage.js';
import { withTx } from '../db/tx.js';
import { enqueue } from '../jobs/enqueue.js';
import type { TaskHandler } from '../jobs/runner.js';
import { emit } from '../outbox/outbox.js';
import type { Logger } from '../telemetry/log.js';
import { dispatchJobKey, messageResource } from './messages.js';
import { historyRecord, messageById, messageClaimScheduled, messageMarkRejected, messageMarkSent } from './messages.sql.js';

export interface DispatchDeps {
  pool: pg.Pool;
  carrier: CarrierClient;
  log: Logger;
  /** The clock; a parameter so tests move time instead of sleeping. */
  now?: () => Date;
}

export type DispatchOutcome = 'sent' | 'rejected' | 'retrying' | 'gave_up' | 'not_due' | 'nothing_to_send';

// 10 tries over about 14 minutes, then the message fails with carrier_unavailable.
const MAX_ATTEMPTS = 10;
const MAX_BACKOFF_MS = 5 * 60_000;
const MAX_RETRY_AFTER_MS = 60 * 60_000;

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
      await withTx(deps.pool, (tx) => enqueue(tx, 'message.dispatch', { messageId }, { runAt, jobKey: dispatchJobKey(messageId) }));
      return 'not_due';
    }
    // Claim it first: once queued, a cancel is refused, so we never send a canceled message.
    const claimed = await withTx(deps.pool, (tx) => messageClaimScheduled(tx, messageId, start));
    if (!claimed) return 'nothing_to_send';
  }

  const result = await deps.carrier.sendMessage({ from: m.from_number, to: m.to_number, text: m.body, mediaUrls: m.media_urls });

  if (result.ok) {
    return withTx(deps.pool, async (tx) => {
      const at = now();
      const sent = await messageMarkSent(tx, messageId, result.carrierMessageId, at);
      if (!sent) return 'nothing_to_send';
      await bill(tx, {
        accountId: sent.account_id,
        tenantId: sent.tenant_id,
        kind: sent.encoding === 'MMS' ? 'mms_outbound' : 'sms_segment_outbound',
        quantity: sent.segments,
        sourceId: sent.id,
        occurredAt: at,
      });
      await historyRecord(tx, { messageId, source: 'dispatch', status: 'sent', effect: 'applied', occurredAt: at });
      await emit(tx, { accountId: sent.account_id, tenantId: sent.tenant_id, type: 'message.sent', subjectId: sent.id, data: messageResource(sent), occurredAt: at });
      return 'sent';
    });
  }

  const giveUp = result.kind === 'retry' && attempt >= MAX_ATTEMPTS;
  if (result.kind === 'rejected' || giveUp) {
    const code = result.kind === 'rejected' ? result.code : 'carrier_unavailable';
    return withTx(deps.pool, async (tx) => {
      const at = now();
      const failed = await messageMarkRejected(tx, messageId, code, at);
      if (!failed) return 'nothing_to_send';
      await historyRecord(tx, { messageId, source: 'dispatch', status: 'failed', errorCode: code, effect: 'applied', note: result.detail, occurredAt: at });
      await emit(tx, { accountId: failed.account_id, tenantId: failed.tenant_id, type: 'message.failed', subjectId: failed.id, data: messageResource(failed), occurredAt: at });
      return giveUp ? 'gave_up' : 'rejected';
    });
  }

  const backoff = Math.min(2 ** attempt * 1000, MAX_BACKOFF_MS);
  const delay = result.retryAfterMs !== null ? Math.min(Math.max(result.retryAfterMs, 1000), MAX_RETRY_AFTER_MS) : backoff;
  deps.log.warn({ messageId, attempt, status: result.status, delayMs: delay, detail: result.detail }, 'carrier did not take the message; retrying');
  await withTx(deps.pool, (tx) =>
    enqueue(tx, 'message.dispatch', { messageId, attempt: attempt + 1 }, { runAt: new Date(now().getTime() + delay), jobKey: dispatchJobKey(messageId) }),
  );
  return 'retrying';
}

export function dispatchTask(deps: DispatchDeps): TaskHandler<'message.dispatch'> {
  return async (payload) => {
    await dispatchMessage(deps, payload.messageId, payload.attempt ?? 1);
  };
}
