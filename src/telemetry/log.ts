// Structured logging: one pino logger per process, handed down explicitly.
// At info level nothing logs secrets or whole payloads; the redact list is the
// backstop for fields that must never appear even at debug.

import { pino, type Logger, type DestinationStream } from 'pino';

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
