// Housekeeping that keeps tables bounded, run by the worker role every 15
// minutes (one job at a time across all workers): expired Idempotency-Keys, and
// processed raw carrier events past HANDSET_CARRIER_EVENT_RETENTION (with the
// kept endings of carrier legs no call ever claimed). Deleting a
// carrier event forgets only the delivery, not the fact: a duplicate that arrives
// after its original was deleted is stored again and finds the resource guards
// (terminal status, ended_at, the ring cursor) with nothing left to do.

import type pg from 'pg';
import { idempotencyKeysExpire } from './api/idempotency.sql.js';
import { legEndingsExpire } from './calls/calls.sql.js';
import { carrierEventDeleteProcessed } from './carrier/events.sql.js';
import type { TaskHandler } from './jobs/runner.js';
import type { Logger } from './telemetry/log.js';

// graphile-worker crontab: every 15 minutes, one job at a time across all workers.
export const MAINTENANCE_CRONTAB = '*/15 * * * * maintenance ?jobKey=maintenance&max=3\n';

const BATCH = 5_000;
// One run deletes at most this many, so a backlog drains over several runs
// instead of one long transaction-heavy job.
const MAX_PER_RUN = 500_000;

export interface MaintenanceDeps {
  pool: pg.Pool;
  log: Logger;
  carrierEventRetentionMs: number;
}

export async function runMaintenance(
  deps: MaintenanceDeps,
  now = new Date(),
): Promise<{ idempotencyKeys: number; carrierEvents: number; legEndings: number }> {
  const idempotencyKeys = await idempotencyKeysExpire(deps.pool);
  const before = new Date(now.getTime() - deps.carrierEventRetentionMs);
  const legEndings = await legEndingsExpire(deps.pool, before);
  let carrierEvents = 0;
  for (;;) {
    const n = await carrierEventDeleteProcessed(deps.pool, before, BATCH);
    carrierEvents += n;
    if (n < BATCH || carrierEvents >= MAX_PER_RUN) break;
  }
  if (idempotencyKeys + carrierEvents + legEndings > 0) {
    deps.log.info({ idempotencyKeys, carrierEvents, legEndings }, 'maintenance: expired rows deleted');
  }
  return { idempotencyKeys, carrierEvents, legEndings };
}

export function maintenanceTask(deps: MaintenanceDeps): TaskHandler<'maintenance'> {
  return async () => {
    await runMaintenance(deps);
  };
}
