// The recovery job: re-sends, oldest first and one after the other (each once the
// previous was answered), every delivery of an endpoint that failed or was
// skipped since a moment the customer chose, with the original event ids. Each
// that gets its 2xx becomes succeeded, in the transaction that records the
// attempt, so a recovery asked for again never re-sends what this one delivered.
// The first attempt that fails stops it (the endpoint is still not well; asking
// again resumes from the start, and skips what got through). It works in
// batches, re-enqueueing itself, so it never holds a slot for long, and takes its
// account's share of delivery capacity like any attempt.

import type pg from 'pg';
import { withTx } from '../db/tx.js';
import { enqueue } from '../jobs/enqueue.js';
import { jobKeys } from '../jobs/keys.js';
import type { TaskHandler } from '../jobs/runner.js';
import type { Logger } from '../telemetry/log.js';
import type { Metrics } from '../telemetry/metrics.js';
import { attemptDelivery } from './attempt.js';
import type { Capacity } from './capacity.js';
import { attemptRecord, deliveryLoad, deliveryMarkRedelivered } from './deliveries.sql.js';
import { endpointLock, endpointRecordSuccess, endpointRecordTimeout } from './endpoints.sql.js';
import type { Keyring } from './keyring.js';
import { recoveryAdvance, recoveryById, recoveryFinish, recoveryNextDelivery } from './recoveries.sql.js';

export interface RecoverDeps {
  pool: pg.Pool;
  log: Logger;
  metrics: Metrics;
  keys: Keyring;
  capacity: Capacity;
  allowPrivate: boolean;
  timeoutMs: number;
  now?: () => Date;
}

/** Deliveries one run re-sends before it hands its slot back (and re-enqueues itself). */
export const RECOVERY_BATCH = 20;

export type RecoverStep = 'resent' | 'completed' | 'stopped' | 'gone' | 'waiting';

/** Re-sends the recovery's next delivery; says what happened. */
export async function recoverOne(deps: RecoverDeps, recoveryId: string): Promise<RecoverStep> {
  const clock = deps.now ?? (() => new Date());
  const r = await recoveryById(deps.pool, recoveryId);
  if (r?.status !== 'running') return 'gone';
  const next = await recoveryNextDelivery(deps.pool, r);
  if (!next) {
    await recoveryFinish(deps.pool, r.id, 'completed', null, clock());
    return 'completed';
  }
  const work = await deliveryLoad(deps.pool, next.id);
  if (!work) return 'gone';
  const { endpoint, event } = work;
  if (!endpoint.enabled || endpoint.deleted_at) {
    await recoveryFinish(deps.pool, r.id, 'stopped', 'the endpoint was disabled or deleted', clock());
    return 'stopped';
  }
  // The account's share, like any attempt: waited for here (a recovery is one job, one at a time).
  const release = await deps.capacity.acquire(endpoint.account_id, endpoint.id, Date.now() + deps.timeoutMs);
  if (!release) return 'waiting';
  const startedAt = clock();
  let result: Awaited<ReturnType<typeof attemptDelivery>>;
  try {
    result = await attemptDelivery(deps, endpoint, event, work.sealedSecrets, startedAt);
  } finally {
    release();
  }
  const succeeded = result.status !== null && result.status >= 200 && result.status < 300;
  return withTx(deps.pool, async (tx) => {
    await endpointLock(tx, endpoint.id);
    await attemptRecord(tx, {
      delivery_id: next.id,
      trigger: 'recover',
      url: endpoint.url,
      started_at: startedAt,
      duration_ms: result.durationMs,
      response_status: result.status,
      response_excerpt: result.excerpt,
      error: result.error ?? (succeeded ? null : `HTTP ${result.status}`),
    });
    if (!succeeded) {
      await endpointRecordTimeout(tx, endpoint.id, result.timedOut);
      const why = result.status === null ? (result.error ?? 'no answer') : `HTTP ${result.status}`;
      await recoveryFinish(tx, r.id, 'stopped', `${event.id}: ${why}`, startedAt);
      return 'stopped' as const;
    }
    await deliveryMarkRedelivered(tx, next.id);
    await endpointRecordSuccess(tx, endpoint.id);
    if (!(await recoveryAdvance(tx, r.id, { occurredAt: next.occurred_at, deliveryId: next.id })))
      return 'gone' as const;
    return 'resent' as const;
  });
}

export function recoverTask(deps: RecoverDeps): TaskHandler<'delivery.recover'> {
  const clock = deps.now ?? (() => new Date());
  return async ({ recoveryId }) => {
    for (let i = 0; i < RECOVERY_BATCH; i++) {
      const step = await recoverOne(deps, recoveryId);
      if (step === 'resent') {
        deps.metrics.deliveries.inc({ outcome: 'recovered' });
        continue;
      }
      if (step === 'waiting') {
        const runAt = new Date(clock().getTime() + 1_000);
        await withTx(deps.pool, (tx) =>
          enqueue(tx, 'delivery.recover', { recoveryId }, { jobKey: jobKeys.recovery(recoveryId), runAt }),
        );
      }
      return;
    }
    // More to do: the next batch, at once, behind whoever is waiting.
    await withTx(deps.pool, (tx) =>
      enqueue(tx, 'delivery.recover', { recoveryId }, { jobKey: jobKeys.recovery(recoveryId) }),
    );
  };
}
