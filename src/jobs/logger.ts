// graphile-worker's log lines, written through our pino logger at the levels we
// judge them by. Apart from telemetry/log.ts so that loading a logger does not load
// graphile-worker (the CLI's --help and its tools never touch a job).

import { Logger as WorkerLogger, type LogLevel } from 'graphile-worker';
import { isUnavailable } from '../db/errors.js';
import type { Logger } from '../telemetry/log.js';

/**
 * graphile-worker's logger interface, writing through our pino logger. Its own
 * chatter ("Worker connected") and the job failures our runner already logs stay
 * at debug; a database failure it reports is an expected condition (the runner
 * recovers from it), so a warning, not an error.
 */
export function workerLogger(log: Logger): WorkerLogger {
  return new WorkerLogger((scope) => (level: LogLevel, message: string, meta?: unknown) => {
    const m = (meta ?? {}) as { failure?: unknown; error?: unknown; fatalError?: unknown };
    const fields = {
      scope: { label: scope.label, taskIdentifier: scope.taskIdentifier, jobId: scope.jobId },
      ...(meta as object),
    };
    if (m.failure === true) log.debug(fields, message);
    else if (level === 'error' && !isUnavailable(m.fatalError ?? m.error)) log.error(fields, message);
    else if (level === 'error' || level === 'warning') log.warn(fields, message);
    else log.debug(fields, message);
  });
}
