// Housekeeping that keeps tables bounded, run by the worker role on a schedule:
// expired Idempotency-Keys now; the carrier event retention joins it later.

import type pg from 'pg';
import { idempotencyKeysExpire } from './api/idempotency.js';
import type { TaskHandler } from './jobs/runner.js';
import type { Logger } from './telemetry/log.js';

declare global {
  namespace GraphileWorker {
    interface Tasks {
      'maintenance': Record<string, unknown>;
    }
  }
}

// graphile-worker crontab: every 15 minutes, one job at a time across all workers.
export const MAINTENANCE_CRONTAB = '*/15 * * * * maintenance ?jobKey=maintenance&max=3\n';

export function maintenanceTask(deps: { pool: pg.Pool; log: Logger }): TaskHandler<'maintenance'> {
  return async () => {
    const keys = await idempotencyKeysExpire(deps.pool);
    if (keys > 0) deps.log.info({ idempotencyKeys: keys }, 'maintenance: expired rows deleted');
  };
}
