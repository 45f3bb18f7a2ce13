// Structured logging: one pino logger per process, handed down explicitly.
// At info level nothing logs secrets or whole payloads; the redact list is the
// backstop for fields that must never appear even at debug.

import { pino, type Logger, type DestinationStream } from 'pino';
import { Logger as WorkerLogger, type LogLevel } from 'graphile-worker';
import { isUnavailable } from '../db/errors.js';

export type { Logger };

export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { pid: process.pid },
      redact: {
        paths: [
          'req.headers.authorization',
          'headers.authorization',
          '*.secret',
          '*.api_key',
          '*.apiKey',
          'secret',
          'api_key',
        ],
        censor: '[redacted]',
      },
    },
    destination,
  );
}

/**
 * Dev mode's logger: everything at `level` to a file, and only warnings and
 * errors to the terminal, so the console stays readable.
 */
export function createFileLogger(level: string, file: string): Logger {
  const streams = [
    { level: level as pino.Level, stream: pino.destination({ dest: file, mkdir: true, sync: false }) },
    { level: 'warn' as const, stream: process.stderr },
  ];
  return createLogger(level, pino.multistream(streams));
}

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
