// One HTTP attempt of one customer webhook, then its outcome recorded in one
// transaction: a delivery job's, or the delivery relay's for a first attempt it
// claimed (relay.ts). 2xx within the timeout succeeds and resets the
// endpoint's health. Anything else counts a failure atomically; at the threshold
// (or on 410 Gone) the endpoint is disabled by one guarded UPDATE, announced by
// webhook_endpoint.disabled, and its pending deliveries are skipped. Otherwise the
// next attempt is scheduled per the retry schedule (honouring Retry-After within
// bounds) by re-enqueueing this job in the same transaction; a delivery that fails
// its last retry is announced by webhook_delivery.exhausted. No database
// connection is held during the HTTP call. A crash after the receiver answered
// but before the record commits sends the event again with the same webhook-id:
// delivery is at-least-once.
//
// Fairness: deliveries run in capacity of their own (never beside carrier
// events); an account has at most its share of that capacity in flight, and
// accounts whose endpoints may hang share one account's worth of it beyond their
// first slot each (capacity.ts), so several accounts' hanging endpoints still
// leave an account with nothing in flight a slot; the rest of its attempts wait their turn (in its lane, or as
// rows the relay hands back and claims again when there is room); and an endpoint that is
// failing runs in its own serial lane (its breaker: one attempt at a time, each
// a real delivery with the whole timeout, the first 2xx closing it), so a hanging
// endpoint holds one slot while every other endpoint's deliveries keep flowing.

import type pg from 'pg';
import { withTx } from '../db/tx.js';
import { enqueue } from '../jobs/enqueue.js';
import { jobKeys, lanes } from '../jobs/keys.js';
import { parseRetryAfter } from '../jobs/retry.js';
import type { TaskHandler } from '../jobs/runner.js';
import { emit } from '../outbox/outbox.js';
import { ABOUT_ENDPOINT_EVENT_TYPES, TEST_EVENT_TYPE } from '../outbox/outbox.sql.js';
import type { Logger } from '../telemetry/log.js';
import type { Metrics } from '../telemetry/metrics.js';
import { attemptDelivery } from './attempt.js';
import type { Capacity, Release } from './capacity.js';
import {
  attemptRecord,
  deliveryFinish,
  deliveryLoad,
  deliveryMarkRedelivered,
  deliveryScheduleRetry,
  deliverySkipForEndpoint,
  deliveryUnrelay,
  deliverySkipPending,
  deliveriesUnrelayForEndpoint,
  type AttemptTrigger,
  type DeliveryWork,
} from './deliveries.sql.js';
import { disableEndpoint, endpointResource } from './endpoints.js';
import {
  type EndpointRow,
  endpointLock,
  endpointRecordFailure,
  endpointRecordSuccess,
  endpointRecordTimeout,
} from './endpoints.sql.js';
import type { AttemptResult } from './http.js';
import type { Keyring } from './keyring.js';
import { scheduleDeliveries } from './schedule.js';
import type { SuccessLog } from './successes.js';

export interface DeliveryDeps {
  pool: pg.Pool;
  log: Logger;
  metrics: Metrics;
  keys: Keyring;
  capacity: Capacity;
  /** Where a success at an endpoint read healthy is recorded, batched with others (successes.ts). */
  successes: SuccessLog;
  /** Delays before each retry, in ms; its length is the number of retries. */
  retrySchedule: number[];
  disableAfter: number;
  allowPrivate: boolean;
  timeoutMs: number;
  /** The clock; a parameter so tests move time instead of sleeping. */
  now?: () => Date;
}

/** graphile-worker runs lower numbers first; first attempts are 0. */
const BEYOND_SHARE_PRIORITY = 1;

type DeliveryPayload = GraphileWorker.Tasks['delivery.attempt'];

const jobKeyOf = (trigger: AttemptTrigger, deliveryId: string) =>
  trigger === 'redeliver' ? jobKeys.redelivery(deliveryId) : jobKeys.delivery(deliveryId);

export function deliveryTask(deps: DeliveryDeps): TaskHandler<'delivery.attempt'> {
  return (payload, job) => deliver(deps, payload, job);
}

/** One attempt of one delivery (a job's, or the relay's for a claimed row), routed by its endpoint's health and its account's share, then recorded. */
export async function deliver(
  deps: DeliveryDeps,
  payload: DeliveryPayload,
  job: {
    inSerialQueue: boolean;
    /** The relay's: instead of a move to a lane when the account or endpoint has its share in flight, hand the row back. */
    whenFull?: () => Promise<void>;
    /** What the attempt needs, when the caller has read it already (the relay's claim). */
    work?: DeliveryWork;
  },
): Promise<void> {
  const clock = deps.now ?? (() => new Date());
  const { deliveryId, trigger } = payload;
  const redelivery = trigger === 'redeliver';
  const work = job.work ?? (await deliveryLoad(deps.pool, deliveryId));
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

  // Where the attempt runs: in parallel while its endpoint is healthy and has room;
  // in the endpoint's lane (one at a time) once the endpoint fails or has its
  // share in flight; in its account's lane once the account has its share, where
  // the one attempt at the head waits here for a slot and the rest wait queued.
  // A moved attempt yields to first attempts (a lower priority): it is an endpoint's or an
  // account's beyond its share, and must not queue ahead of everyone else's.
  const move = (lane: string) =>
    withTx(deps.pool, async (tx) => {
      // The lane's job takes the delivery over from the relay, if the relay had it: never both.
      if (!redelivery) await deliveryUnrelay(tx, deliveryId);
      await enqueue(
        tx,
        'delivery.attempt',
        { ...payload, lane },
        { queueName: lane, jobKey: jobKeyOf(trigger, deliveryId), priority: BEYOND_SHARE_PRIORITY },
      );
    });
  const accountLane = lanes.account(endpoint.account_id);
  const endpointLane = lanes.endpoint(endpoint.id);
  let release: Release | null;
  if (payload.lane === accountLane && job.inSerialQueue) {
    release = await deps.capacity.acquire(endpoint.account_id, endpoint.id, Date.now() + deps.timeoutMs);
    if (!release) {
      await move(accountLane); // still no slot: look again, behind the others
      deps.metrics.deliveriesDeferred.inc();
      return;
    }
  } else {
    const failing = endpoint.consecutive_failures > 0 || endpoint.timing_out;
    const inEndpointLane = payload.lane === endpointLane && job.inSerialQueue;
    if (failing && !inEndpointLane) return move(endpointLane);
    const full = deps.capacity.full(endpoint.account_id, endpoint.id);
    if (full && job.whenFull) {
      deps.metrics.deliveriesDeferred.inc();
      return job.whenFull();
    }
    if (full === 'endpoint' && !inEndpointLane) return move(endpointLane);
    release = full ? null : deps.capacity.take(endpoint.account_id, endpoint.id);
    if (!release) {
      deps.metrics.deliveriesDeferred.inc();
      return move(accountLane);
    }
  }

  const startedAt = clock();
  let result: AttemptResult;
  try {
    result = await attemptDelivery(deps, endpoint, event, work.sealedSecrets, startedAt);
  } finally {
    release();
  }
  deps.metrics.deliveryDuration.observe(result.durationMs / 1000);

  const succeeded = result.status !== null && result.status >= 200 && result.status < 300;
  deps.capacity.note(endpoint.id, result.durationMs, succeeded, endpoint.account_id);
  // A success at an endpoint read healthy has no health to reset: it touches the
  // delivery row alone, so attempts to a busy endpoint do not queue on the
  // endpoint's row, and it is recorded together with the others finishing now.
  // (A failure counted meanwhile stays until a success in the endpoint's lane,
  // which reads it unhealthy, resets it.)
  const healthy = endpoint.consecutive_failures === 0 && !endpoint.timing_out;
  const logged = {
    delivery_id: deliveryId,
    trigger,
    url: endpoint.url,
    started_at: startedAt,
    duration_ms: result.durationMs,
    response_status: result.status,
    response_excerpt: result.excerpt,
  };
  if (succeeded && healthy && !redelivery) {
    const finished = await deps.successes.record(logged);
    // Not finished: skipped meanwhile (its endpoint disabled); the success is logged, not un-skipped.
    deps.metrics.deliveries.inc({ outcome: finished ? 'succeeded' : 'skipped' });
    return;
  }
  const outcome = await withTx(deps.pool, async (tx) => {
    // Lock order: the endpoint row first, then delivery rows. Two attempts to one
    // endpoint finishing together must not take them in opposite orders.
    const counted = !succeeded && !redelivery;
    let failures: number | null = null;
    if (counted) {
      failures = await endpointRecordFailure(tx, endpoint.id, {
        at: startedAt.toISOString(),
        status: result.status,
        error: result.error ?? `HTTP ${result.status}`,
        timedOut: result.timedOut,
      });
      // Its first failure: the deliveries waiting for the relay go to the endpoint's lane now,
      // together, instead of each being claimed and moved in a transaction of its own (a burst
      // of commits that would hold up every other account's).
      if (failures === 1) {
        await scheduleDeliveries(tx, await deliveriesUnrelayForEndpoint(tx, endpoint.id, clock()), 'scheduled');
      }
    } else {
      await endpointLock(tx, endpoint.id);
    }
    const attempt = await attemptRecord(tx, {
      ...logged,
      error: result.error ?? (succeeded ? null : `HTTP ${result.status}`),
    });
    if (redelivery) {
      if (succeeded) {
        await deliveryMarkRedelivered(tx, deliveryId);
        await endpointRecordSuccess(tx, endpoint.id);
        return 'succeeded' as const;
      }
      await endpointRecordTimeout(tx, endpoint.id, result.timedOut);
      if (result.status === 410 && (await disableEndpoint(tx, endpoint.id, 'gone', startedAt))) {
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
    if (reason && (await disableEndpoint(tx, endpoint.id, reason, startedAt))) {
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
        await enqueue(
          tx,
          'delivery.attempt',
          { ...payload, lane: endpointLane },
          {
            runAt: at,
            jobKey: jobKeys.delivery(deliveryId),
            queueName: endpointLane,
            priority: BEYOND_SHARE_PRIORITY,
          },
        );
        return 'retrying' as const;
      }
    }
    if (await deliveryFinish(tx, deliveryId, 'failed')) await announceExhausted(tx, endpoint, event, deliveryId);
    return 'failed' as const;
  });
  deps.metrics.deliveries.inc({ outcome });
}

const OPERATIONAL: readonly string[] = [...ABOUT_ENDPOINT_EVENT_TYPES, TEST_EVENT_TYPE];

/**
 * webhook_delivery.exhausted, to the account's other endpoints. Not for a
 * delivery of an operational event itself: two failing endpoints would otherwise
 * keep announcing each other's failures to each other.
 */
async function announceExhausted(
  tx: Parameters<typeof emit>[0],
  endpoint: EndpointRow,
  event: { id: string; type: string },
  deliveryId: string,
) {
  if (OPERATIONAL.includes(event.type)) return;
  const locked = await endpointLock(tx, endpoint.id);
  await emit(tx, {
    accountId: endpoint.account_id,
    tenantId: null,
    type: 'webhook_delivery.exhausted',
    subjectId: endpoint.id,
    data: { ...endpointResource(locked ?? endpoint), event_id: event.id, delivery_id: deliveryId },
    occurredAt: new Date(),
  });
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
