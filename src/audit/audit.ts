// `handset audit`: proves the exactly-once invariants over the whole database. Each check
// (checks.sql.ts) is one set-based statement; all of them read one snapshot (a
// REPEATABLE READ, READ ONLY transaction when given a pool), so the report
// describes a single moment even while the platform runs. Reads only; owns no
// table.

import { twilioEventTypes } from '../carrier/twilio/events.js';
import type pg from 'pg';
import { telnyxAdapter } from '../carrier/telnyx/adapter.js';
import { formatDuration } from '../config.js';
import { boundsRecorded, type ReconcileBounds, type RecordedBounds } from '../reconcile/bounds.sql.js';
import { CHECKS, type CheckDef, type CheckOptions, type Invariant, type WaitBounds } from './checks.sql.js';

export type { Invariant } from './checks.sql.js';

export interface AuditOptions {
  /** Carrier events younger than this may still be in flight (default 60). */
  graceSeconds?: number;
  /**
   * Reconciliation's settings, which bound how long anything may wait for the
   * carrier, for a database whose workers recorded none (defaults: serve's). The
   * bounds the workers recorded are the ones judged by (reconcile/bounds.sql.ts).
   */
  reconcile?: ReconcileBounds;
  /** How many offending ids each check lists (default 10). */
  sampleLimit?: number;
}

export interface AuditCheck {
  /** Stable machine name, e.g. "messages.billed_once". */
  key: string;
  invariant: Invariant;
  /** The rule checked. */
  name: string;
  /** What `checked` counts ("messages", "pending deliveries"). */
  unit: string;
  /** Rows examined. */
  checked: number;
  violations: number;
  /** Offending ids, in id order (so oldest first), at most sampleLimit. */
  sample: string[];
}

/** The bounds invariant 7 was judged with, and where they came from. */
export interface AuditBounds {
  /**
   * `recorded`: by the workers that wrote the database, each subject judged by the
   * most lenient setting in force since it began waiting; `configuration`: none
   * recorded, so the audit's own (AuditOptions.reconcile).
   */
  source: 'recorded' | 'configuration';
  /** The one last in force first; a configured setting has no times. */
  settings: (ReconcileBounds & { firstSeenAt: string | null; lastSeenAt: string | null })[];
}

export interface AuditReport {
  ok: boolean;
  bounds: AuditBounds;
  checks: AuditCheck[];
}

export const DEFAULT_GRACE_SECONDS = 60;
const DEFAULT_RECONCILE = { intervalMs: 60_000, afterMs: 60_000, messageAfterMs: 3_600_000 };
export const DEFAULT_SAMPLE_LIMIT = 10;

export async function runAudit(db: pg.Pool | pg.PoolClient, opts: AuditOptions = {}): Promise<AuditReport> {
  const graceSeconds = opts.graceSeconds ?? DEFAULT_GRACE_SECONDS;
  const sampleLimit = opts.sampleLimit ?? DEFAULT_SAMPLE_LIMIT;
  if (!(graceSeconds >= 0) || !Number.isFinite(graceSeconds))
    throw new RangeError(`graceSeconds must be a non-negative number, got ${graceSeconds}`);
  if (!Number.isInteger(sampleLimit) || sampleLimit < 0)
    throw new RangeError(`sampleLimit must be a non-negative integer, got ${sampleLimit}`);
  const configured = opts.reconcile ?? DEFAULT_RECONCILE;
  const run = async (client: pg.PoolClient) => {
    const bounds = await judgedBy(client, configured);
    return report(bounds, await runChecks(client, checkOptions(graceSeconds, bounds), sampleLimit));
  };

  // A client is used as it is (the caller's session, perhaps its transaction).
  if (isClient(db)) return run(db);

  const client = await db.connect();
  let broken: Error | undefined;
  try {
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    try {
      const result = await run(client);
      await client.query('COMMIT');
      return result;
    } catch (err) {
      await client.query('ROLLBACK').catch((rollbackErr: Error) => {
        broken = rollbackErr;
      });
      throw err;
    }
  } finally {
    client.release(broken);
  }
}

function isClient(db: pg.Pool | pg.PoolClient): db is pg.PoolClient {
  return typeof (db as pg.PoolClient).release === 'function';
}

function report(bounds: AuditBounds, checks: AuditCheck[]): AuditReport {
  return { ok: checks.every((c) => c.violations === 0), bounds, checks };
}

/** The bounds the workers recorded, in the audit's snapshot; else the configured ones. */
async function judgedBy(client: pg.PoolClient, configured: ReconcileBounds): Promise<AuditBounds> {
  const recorded: RecordedBounds[] = await boundsRecorded(client);
  if (recorded.length === 0) {
    return { source: 'configuration', settings: [{ ...configured, firstSeenAt: null, lastSeenAt: null }] };
  }
  return {
    source: 'recorded',
    settings: recorded.map((b) => ({
      intervalMs: b.intervalMs,
      afterMs: b.afterMs,
      messageAfterMs: b.messageAfterMs,
      firstSeenAt: b.firstSeenAt.toISOString(),
      lastSeenAt: b.lastSeenAt.toISOString(),
    })),
  };
}

function checkOptions(graceSeconds: number, bounds: AuditBounds): CheckOptions {
  const recorded = bounds.source === 'recorded' ? bounds.settings : [];
  // The latest setting (recorded or configured) judges a subject none was in force for since it began waiting.
  const latest = bounds.settings[0]!;
  const wait = (boundOf: (b: ReconcileBounds) => number): WaitBounds => ({
    recordedMs: recorded.map(boundOf),
    lastInForce: recorded.map((b) => new Date(b.lastSeenAt!)),
    otherwiseMs: boundOf(latest),
  });
  return {
    graceSeconds,
    call: wait((b) => b.intervalMs + b.afterMs),
    message: wait((b) => b.intervalMs + b.messageAfterMs),
    receiptEventTypes: [...telnyxAdapter().eventTypes('message.receipt'), ...twilioEventTypes('message.receipt')],
  };
}

async function runChecks(client: pg.PoolClient, options: CheckOptions, sampleLimit: number): Promise<AuditCheck[]> {
  const results: AuditCheck[] = [];
  for (const def of CHECKS) results.push(await runCheck(client, def, options, sampleLimit));
  return results;
}

async function runCheck(
  client: pg.PoolClient,
  def: CheckDef,
  options: CheckOptions,
  sampleLimit: number,
): Promise<AuditCheck> {
  let row: { checked: number; violations: number; sample: string[] };
  try {
    const { rows } = await client.query<typeof row>({
      text: `WITH subject AS MATERIALIZED (${def.subjects})
             SELECT (SELECT count(*) FROM subject)::int AS checked,
                    (SELECT count(*) FROM subject WHERE ok IS NOT TRUE)::int AS violations,
                    ARRAY(SELECT id FROM subject WHERE ok IS NOT TRUE ORDER BY id LIMIT $1::int) AS sample`,
      values: [sampleLimit, ...(def.values?.(options) ?? [])],
    });
    row = rows[0]!;
  } catch (err) {
    throw new Error(`audit check "${def.name}" could not run: ${(err as Error).message}`, { cause: err });
  }
  return {
    key: def.key,
    invariant: def.invariant,
    name: def.name,
    unit: def.unit(options),
    checked: row.checked,
    violations: row.violations,
    sample: row.sample,
  };
}

const count = (n: number) => n.toLocaleString('en-US');
const plural = (n: number, noun: string) => `${count(n)} ${noun}${n === 1 ? '' : 's'}`;

/**
 * The bounds invariant 7 was judged with, one line per check, then a summary:
 *   ✔ 3  message terminal status, one event per transition (checked 1,204 messages): ok
 *   ✘ 4  message segments billed exactly once (checked 900 messages): 2 violations: msg_…, msg_…
 */
export function formatAuditReport(report: AuditReport): string {
  const lines = [...boundsLines(report.bounds)];
  for (const c of report.checks) {
    const head = `${c.violations === 0 ? '✔' : '✘'} ${String(c.invariant).padEnd(2)} ${c.name} (checked ${count(c.checked)} ${c.unit})`;
    const what = plural(c.violations, 'violation');
    const more = c.violations > c.sample.length ? `, … (${count(c.violations - c.sample.length)} more)` : '';
    if (c.violations === 0) lines.push(`${head}: ok`);
    else if (c.sample.length === 0) lines.push(`${head}: ${what}`);
    else lines.push(`${head}: ${what}: ${c.sample.join(', ')}${more}`);
  }
  const broken = report.checks.filter((c) => c.violations > 0);
  if (broken.length === 0) {
    lines.push(`✔ all ${report.checks.length} checks hold`);
  } else {
    const total = broken.reduce((n, c) => n + c.violations, 0);
    const invariants = [...new Set(broken.map((c) => c.invariant))];
    lines.push(
      `✘ ${broken.length} of ${report.checks.length} checks broken: ${plural(total, 'violation')} ` +
        `(invariant${invariants.length === 1 ? '' : 's'} ${invariants.join(', ')})`,
    );
  }
  return lines.join('\n');
}

/**
 *   invariant 7 judged with the bounds recorded by the workers that wrote this database: HANDSET_RECONCILE_INTERVAL 1m, … (in force … to …)
 * one line, or a line per setting when several were recorded.
 */
function boundsLines(bounds: AuditBounds): string[] {
  const setting = (b: AuditBounds['settings'][number]) =>
    `HANDSET_RECONCILE_INTERVAL ${formatDuration(b.intervalMs)}, HANDSET_RECONCILE_AFTER ${formatDuration(b.afterMs)}, ` +
    `HANDSET_RECONCILE_MESSAGE_AFTER ${formatDuration(b.messageAfterMs)}` +
    (b.firstSeenAt ? ` (in force ${b.firstSeenAt} to ${b.lastSeenAt})` : '');
  if (bounds.source === 'configuration') {
    return [
      `invariant 7 judged with this command's configuration (no worker recorded its bounds in this database): ${setting(bounds.settings[0]!)}`,
    ];
  }
  if (bounds.settings.length === 1) {
    return [
      `invariant 7 judged with the bounds recorded by the workers that wrote this database: ${setting(bounds.settings[0]!)}`,
    ];
  }
  return [
    'invariant 7 judged with the bounds recorded by the workers that wrote this database, each subject by the most lenient in force since it began waiting:',
    ...bounds.settings.map((b) => `  ${setting(b)}`),
  ];
}
