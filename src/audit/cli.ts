// `handset audit [--json] [--grace SECONDS]`: runs the audit against a database
// and prints the report. Exit codes: 0 every check holds, 1 a check is broken,
// 2 the audit could not run (bad flags, unreachable database, missing schema),
// so a script never mistakes "could not look" for "found a violation".

import { Command, InvalidArgumentError } from 'commander';
import { EXIT, helpOf, parseAlone, UsageError } from '../cli/command.js';
import { parseDuration } from '../config.js';
import type { Logger } from '../telemetry/log.js';
import { DEFAULT_GRACE_SECONDS, formatAuditReport, runAudit, type AuditOptions } from './audit.js';

/** Not a violation: a script must be able to tell the two apart. */
const COULD_NOT_LOOK = 2;

export interface AuditFlags {
  json?: boolean;
  /** Carrier events younger than this, in seconds, may still be in flight. */
  grace: number;
}

/** `handset audit`: its flags (no action: the caller attaches one). */
export function auditCommand(): Command {
  return new Command('audit')
    .description('check the exactly-once invariants over the whole database')
    .option('--json', 'print the report as JSON')
    .option(
      '--grace <seconds>',
      'carrier events younger than this may still be in flight and are not checked for processing (also 90s, 5m)',
      parseGrace,
      DEFAULT_GRACE_SECONDS,
    )
    .addHelpText(
      'after',
      [
        '',
        'Reads DATABASE_URL, else the database of this checkout’s handset dev (starting it if dev is stopped).',
        'Invariant 7 is judged with the reconciliation bounds the workers recorded in that database (each',
        'subject by the most lenient in force since it began waiting); with none recorded, with this',
        "command's HANDSET_RECONCILE_* settings (serve's defaults when DATABASE_URL is set). The report says which.",
        'exit status: 0 all hold, 1 a violation was found, 2 the audit could not run (bad flags, no database to read).',
      ].join('\n'),
    );
}

export const AUDIT_USAGE = helpOf(auditCommand);

export interface AuditCommandIo {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
  /** Reconciliation's settings (the configuration's), for a database whose workers recorded none. */
  reconcile: AuditOptions['reconcile'];
}

/** `handset audit` from its arguments alone: 2 with the usage on a usage error, 0 after --help. */
export async function runAuditCommand(
  args: string[],
  databaseUrl: string,
  log: Logger,
  io: Partial<AuditCommandIo> = {},
): Promise<number> {
  const stdout = io.stdout ?? process.stdout;
  const stderr = io.stderr ?? process.stderr;
  let parsed: ReturnType<typeof parseAlone>;
  try {
    parsed = parseAlone(auditCommand, args);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    stderr.write(`handset audit: ${err.message}\n\n${AUDIT_USAGE}`);
    return EXIT.usage;
  }
  if (parsed === 'help') {
    stdout.write(AUDIT_USAGE);
    return EXIT.ok;
  }
  return auditDatabase(parsed.opts<AuditFlags>(), databaseUrl, log, io);
}

/** Audits one database and prints the report; the exit code (see the top of this file). */
export async function auditDatabase(
  flags: AuditFlags,
  databaseUrl: string,
  log: Logger,
  io: Partial<AuditCommandIo> = {},
): Promise<number> {
  const stdout = io.stdout ?? process.stdout;
  const stderr = io.stderr ?? process.stderr;
  const { createPool } = await import('../db/pool.js');
  const pool = createPool(databaseUrl, { max: 1, applicationName: 'handset-audit', log });
  try {
    const report = await runAudit(pool, {
      graceSeconds: flags.grace,
      ...(io.reconcile ? { reconcile: io.reconcile } : {}),
    });
    stdout.write(flags.json ? `${JSON.stringify(report, null, 2)}\n` : `${formatAuditReport(report)}\n`);
    return report.ok ? EXIT.ok : EXIT.failure;
  } catch (err) {
    log.debug({ err }, 'audit failed');
    stderr.write(`handset audit: could not audit the database: ${(err as Error).message}\n`);
    return COULD_NOT_LOOK;
  } finally {
    await pool.end();
  }
}

/** "60" (seconds), or a duration: "90s", "5m". */
function parseGrace(text: string): number {
  const seconds = /^\d+(\.\d+)?$/.test(text.trim()) ? Number(text) : (parseDuration(text) ?? NaN) / 1000;
  if (!Number.isFinite(seconds)) {
    throw new InvalidArgumentError(`--grace must be a number of seconds (or a duration like 5m), got "${text}"`);
  }
  return seconds;
}
