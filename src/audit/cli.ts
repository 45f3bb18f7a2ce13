// `handset audit [--json] [--grace SECONDS]`: runs the audit against a database
// and prints the report. Exit codes: 0 every check holds, 1 a check is broken,
// 2 the audit could not run (bad flags, unreachable database, missing schema),
// so a script never mistakes "could not look" for "found a violation".

import { parseArgs } from 'node:util';
import { parseDuration } from '../config.js';
import { createPool } from '../db/pool.js';
import type { Logger } from '../telemetry/log.js';
import { DEFAULT_GRACE_SECONDS, formatAuditReport, runAudit, type AuditOptions } from './audit.js';

export const AUDIT_USAGE = `usage: handset audit [--json] [--grace SECONDS]

Checks the exactly-once invariants over the whole database.
  --json             print the report as JSON
  --grace SECONDS    carrier events younger than this may still be in flight
                     and are not checked for processing (default ${DEFAULT_GRACE_SECONDS}; also 90s, 5m)
Exit status: 0 all hold, 1 a violation was found, 2 the audit could not run.
`;

export interface AuditCommandIo {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
  /** Reconciliation's settings (the configuration's), which bound how long anything may wait for the carrier. */
  reconcile: AuditOptions['reconcile'];
}

export async function runAuditCommand(
  args: string[],
  databaseUrl: string,
  log: Logger,
  io: Partial<AuditCommandIo> = {},
): Promise<number> {
  const stdout = io.stdout ?? process.stdout;
  const stderr = io.stderr ?? process.stderr;

  let json: boolean;
  let graceSeconds: number;
  try {
    const { values } = parseArgs({
      args,
      options: { json: { type: 'boolean' }, grace: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
    });
    if (values.help) {
      stdout.write(AUDIT_USAGE);
      return 0;
    }
    json = values.json ?? false;
    graceSeconds = values.grace === undefined ? DEFAULT_GRACE_SECONDS : parseGrace(values.grace);
  } catch (err) {
    stderr.write(`handset audit: ${(err as Error).message}\n\n${AUDIT_USAGE}`);
    return 2;
  }

  const pool = createPool(databaseUrl, { max: 1, applicationName: 'handset-audit', log });
  try {
    const report = await runAudit(pool, { graceSeconds, ...(io.reconcile ? { reconcile: io.reconcile } : {}) });
    stdout.write(json ? `${JSON.stringify(report, null, 2)}\n` : `${formatAuditReport(report)}\n`);
    return report.ok ? 0 : 1;
  } catch (err) {
    log.debug({ err }, 'audit failed');
    stderr.write(`handset audit: could not audit the database: ${(err as Error).message}\n`);
    return 2;
  } finally {
    await pool.end();
  }
}

/** "60" (seconds), or a duration: "90s", "5m". */
function parseGrace(text: string): number {
  const seconds = /^\d+(\.\d+)?$/.test(text.trim()) ? Number(text) : (parseDuration(text) ?? NaN) / 1000;
  if (!Number.isFinite(seconds))
    throw new Error(`--grace must be a number of seconds (or a duration like 5m), got "${text}"`);
  return seconds;
}
