// The delivery job: one HTTP attempt of one customer webhook, then its outcome
// recorded in one transaction. 2xx within the timeout succeeds and resets the
// endpoint's failure count. Anything else counts a failure atomically; at the
// threshold (or on 410 Gone) the endpoint is disabled by one guarded UPDATE and
// its pending deliveries are skipped. Otherwise the next attempt is scheduled per
// the retry schedule (honouring Retry-After within bounds) by re-enqueueing this
// job in the same transaction. No database connection is held during the HTTP
// call. A crash after the receiver answered but before the record commits sends
// the event again with the same webhook-id: delivery is at-least-once.
//
// Isolation: a healthy endpoint may hold up to `parallelPerEndpoint` worker slots
// in this process; beyond that, or once it is failing, its jobs move into the
// endpoint's serial queue, so a hanging endpoint holds one slot, for at most the
// timeout, while every other endpoint's deliveries keep flowing.

import type pg from 'pg';
import { withTx } from '../db/tx.js';
import { enqueue } from '../jobs/enqueue.js';
import { jobKeys, lanes } from '../jobs/keys.js';
import { parseRetryAfter } from '../jobs/retry.js';
import type { TaskHandler } from '../jobs/runner.js';
import { eventBody } from '../outbox/outbox.js';
import type { Logger } from '../telemetry/log.js';
import type { Metrics } from '../telemetry/metrics.js';
import {
  attemptRecord,
  deliveryFinish,
  deliveryMarkRedelivered,
  deliveryLoad,
  deliveryScheduleRetry,
  deliverySkipForEndpoint,
  deliverySkipPending,
  type AttemptTrigger,
} from './deliveries.sql.js';
import { endpointDisable, endpointLock, endpointRecordFailure, endpointRecordSuccess } from './endpoints.sql.js';
import { sendWebhook, type AttemptResult } from './http.js';
import { webhookHeaders } from './signature.js';

export interface DeliveryDeps {
  pool: pg.Pool;
  log: Logger;
  metrics: Metrics;
  /** Delays before each retry, in ms; its length is the number of retries. */
  retrySchedule: number[];
  disableAfter: number;
  allowPrivate: boolean;
  timeoutMs: number;
  parallelPerEndpoint: number;
}

const jobKeyOf = (trigger: AttemptTrigger, deliveryId: string) =>
  trigger === 'redeliver' ? jobKeys.redelivery(deliveryId) : jobKeys.delivery(deliveryId);

export function deliveryTask(deps: DeliveryDeps): TaskHandler<'delivery.attempt'> {
  const inFlight = new Map<string, number>();
  return async (payload, job) => {
    const { deliveryId, trigger } = payload;
    const redelivery = trigger === 'redeliver';
    const work = await deliveryLoad(deps.pool, deliveryId);
    if (!work || (!redelivery && work.delivery.status !== 'pending')) return; // finished meanwhile
    const { endpoint, event } = work;

    if (redelivery && (!endpoint.enabled || endpoint.deleted_at)) return; // disabled since it was asked for
    if (!endpoint.enabled || endpoint.deleted_at) {
      const skipped = await withTx(deps.pool, async (tx) => {
        await endpointLock(tx, endpoint.id);
        return deliverySkipForEndpoint(tx, deliveryId);
      });
      // Not skipped: the endpoint was re-enabled since we read it (or the delivery
      // finished elsewhere). The job's retry reads it afresh.
      if (!skipped) throw new Error(`endpoint ${endpoint.id} changed while delivery ${deliveryId} was being skipped`);
      deps.metrics.deliveries.inc({ outcome: 'skipped' });
      return;
    }

    const busy = inFlight.get(endpoint.id) ?? 0;
    if (!job.inSerialQueue && (endpoint.consecutive_failures > 0 || busy >= deps.parallelPerEndpoint)) {
      await withTx(deps.pool, (tx) =>
        enqueue(tx, 'delivery.attempt', payload, {
          queueName: lanes.endpoint(endpoint.id),
          jobKey: jobKeyOf(trigger, deliveryId),
        }),
      );
      return;
    }

    inFlight.set(endpoint.id, busy + 1);
    const startedAt = new Date();
    let result: AttemptResult;
    try {
      const secrets = [endpoint.secret];
      if (
        endpoint.previous_secret &&
        endpoint.previous_secret_expires_at &&
        endpoint.previous_secret_expires_at > startedAt
      ) {
        secrets.push(endpoint.previous_secret);
      }
      const body = eventBody(event);
      const headers = webhookHeaders(secrets, event.id, Math.floor(startedAt.getTime() / 1000), body);
      result = await sendWebhook(endpoint.url, headers, body, {
        timeoutMs: deps.timeoutMs,
        allowPrivate: deps.allowPrivate,
      });
    } finally {
      const left = (inFlight.get(endpoint.id) ?? 1) - 1;
      if (left > 0) inFlight.set(endpoint.id, left);
      else inFlight.delete(endpoint.id);
    }
    deps.metrics.deliveryDuration.observe(result.durationMs / 1000);

    const succeeded = result.status !== null && result.status >= 200 && result.status < 300;
    const outcome = await withTx(deps.pool, async (tx) => {
      // Lock order: the endpoint row first, then delivery rows. Two attempts to one
      // endpoint finishing together must not take them in opposite orders.
      const counted = !succeeded && !redelivery;
      let failures: number | null = null;
      if (counted) failures = await endpointRecordFailure(tx, endpoint.id);
      else await endpointLock(tx, endpoint.id);
      const attempt = await attemptRecord(tx, {
        delivery_id: deliveryId,
        trigger,
        url: endpoint.url,
        started_at: startedAt,
        duration_ms: result.durationMs,
        response_status: result.status,
        response_excerpt: result.excerpt,
        error: result.error ?? (succeeded ? null : `HTTP ${result.status}`),
      });
      if (redelivery) {
        if (succeeded) {
          await deliveryMarkRedelivered(tx, deliveryId);
          await endpointRecordSuccess(tx, endpoint.id);
          return 'succeeded' as const;
        }
        if (result.status === 410 && (await endpointDisable(tx, endpoint.id, 'gone', startedAt))) {
          await deliverySkipPending(tx, endpoint.id);
          deps.metrics.endpointsDisabled.inc({ reason: 'gone' });
        }
        return 'failed' as const;
      }
      if (failures === null) {
        // A success after another attempt disabled the endpoint is logged, but it
        // neither re-arms the endpoint nor un-skips the delivery.
        if (!(await deliveryFinish(tx, deliveryId, 'succeeded'))) return 'skipped' as const;
        await endpointRecordSuccess(tx, endpoint.id);
        return 'succeeded' as const;
      }

      const reason = result.status === 410 ? 'gone' : failures >= deps.disableAfter ? 'consecutive_failures' : null;
      if (reason && (await endpointDisable(tx, endpoint.id, reason, startedAt))) {
        await deliverySkipPending(tx, endpoint.id);
        deps.metrics.endpointsDisabled.inc({ reason });
        deps.log.warn({ endpointId: endpoint.id, reason, failures }, 'webhook endpoint disabled');
        return 'failed' as const;
      }
      const retryIndex = attempt.scheduled - 1;
      if (retryIndex < deps.retrySchedule.length) {
        const delay = retryDelay(deps.retrySchedule, retryIndex, result.retryAfter, startedAt);
        const at = new Date(startedAt.getTime() + delay);
        if (await deliveryScheduleRetry(tx, deliveryId, at)) {
          await enqueue(tx, 'delivery.attempt', payload, {
            runAt: at,
            jobKey: jobKeys.delivery(deliveryId),
            queueName: lanes.endpoint(endpoint.id),
          });
          return 'retrying' as const;
        }
      }
      await deliveryFinish(tx, deliveryId, 'failed');
      return 'failed' as const;
    });
    deps.metrics.deliveries.inc({ outcome });
  };
}

/**
 * The wait before retry `index` (0-based): the schedule's delay, stretched to a
 * receiver's Retry-After but never past the next delay in the schedule (or
 * twice the last one), so a receiver cannot park a delivery indefinitely.
 */
export function retryDelay(schedule: number[], index: number, retryAfter: string | null, now: Date): number {
  const base = schedule[index]!;
  const ceiling = schedule[index + 1] ?? base * 2;
  const asked = parseRetryAfter(retryAfter, now.getTime());
  if (asked === null || asked <= base) return base;
  return Math.min(asked, ceiling);
}
