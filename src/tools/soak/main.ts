// `npm run soak -- --minutes 60`: the soak (soak.ts) for the given minutes (or
// --seconds, for a short one), then its verdict. Writes samples.json and soak.svg
// into --out (default .handset/soak/<time>); exits 1 with every reason on growth
// beyond 10%, stuck work, an audit violation or a process that exited on its own.

import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { formatAuditReport } from '../../audit/audit.js';
import { createLogger } from '../../telemetry/log.js';
import { show } from './samples.js';
import { DEFAULT_RATE, JUDGED_ROLES, SOAK_ROLES, runSoak, soakSchedule } from './soak.js';
import { renderSvg } from './svg.js';
import { numberOption, parseTool, toolCommand, usageError } from '../command.js';

const cmd = toolCommand(
  'soak',
  'Runs steady load with faults for a long time, then judges growth, stuck work and the audit.',
)
  .addOption(numberOption('--minutes <n>', 'how long the load runs', 0, false).default(60))
  .addOption(numberOption('--seconds <n>', 'the same in seconds, for a short run (at least 10)', 10, false))
  .addOption(numberOption('--rate <n>', 'operations per second', 0.001, false).default(DEFAULT_RATE))
  .option('--out <dir>', 'where samples.json and soak.svg go (default .handset/soak/<time>)')
  .option('--seed <seed>', 'the misbehaviour’s seed: the same seed makes the same run (default soak-<now>)')
  .option(
    '--heap-snapshots',
    'each judged role’s heap after the last sample, into <out>/heap; compare one with a short run’s: ' +
      'node dist/tools/soak/heap-diff.js SHORT LONG',
  )
  .addHelpText(
    'after',
    '\nDATABASE_URL set: a database on that server; unset: embedded PostgreSQL. LOG_LEVEL: the processes’ logs.\n' +
      'Exits 1 with every reason on growth beyond 10%, stuck work, an audit violation or a process that exited.',
  );
const values = parseTool<{
  minutes: number;
  seconds?: number;
  rate: number;
  out?: string;
  seed?: string;
  heapSnapshots?: boolean;
}>(cmd, process.argv.slice(2));
const say = (line: string) => process.stdout.write(`${line}\n`);
const seconds = values.seconds ?? values.minutes * 60;
if (seconds < 10) usageError(cmd, '--minutes/--seconds must give at least 10 s');
const { rate } = values;
const durationMs = seconds * 1000;
const outDir = path.resolve(
  values.out ?? path.join('.handset', 'soak', new Date().toISOString().replace(/[:.]/g, '-')),
);
const schedule = soakSchedule(durationMs);
const heapSnapshotDir = values.heapSnapshots ? path.join(outDir, 'heap') : undefined;
if (heapSnapshotDir) await mkdir(heapSnapshotDir, { recursive: true });

const result = await runSoak({
  durationMs,
  rate,
  schedule,
  drainMs: 5 * 60_000,
  databaseUrl: process.env.DATABASE_URL ?? null,
  seed: values.seed ?? `soak-${Date.now()}`,
  log: createLogger(process.env.LOG_LEVEL ?? 'silent'),
  out: say,
  ...(heapSnapshotDir ? { heapSnapshotDir } : {}),
});

await mkdir(outDir, { recursive: true });
const { samples, growth, ...rest } = result;
await writeFile(
  path.join(outDir, 'samples.json'),
  `${JSON.stringify({ durationMs, rate, schedule, roles: SOAK_ROLES, judged: JUDGED_ROLES, samples, growth, ...rest }, null, 2)}\n`,
);
const title = `Handset soak: ${Math.round(seconds / 60)} min at ${rate} operations/s, worker SIGKILLs ${result.counts.kills}, database cuts ${result.counts.cuts}`;
await writeFile(path.join(outDir, 'soak.svg'), renderSvg(samples, SOAK_ROLES, title));

const c = result.counts;
say('');
say(
  `operations ${c.operations} (shed ${c.shed}), messages ${c.messages}, calls ${c.calls}, carrier events ${c.carrierEvents}, deliveries ${c.deliveries}`,
);
say(
  `endpoint requests: ${Object.entries(c.endpointRequests)
    .map(([k, n]) => `${k} ${n}`)
    .join(', ')}; workers SIGKILLed ${c.kills}; database cuts ${c.cuts}`,
);
if (c.shed > 0)
  say(
    `the load fell behind: ${c.shed} operations were not started because 500 still waited for an answer; ${rate}/s is more than this machine sustains`,
  );
say(`growth, ${growth.basis}:`);
for (const g of growth.growth)
  say(
    `  ${g.role.padEnd(7)} ${g.figure.padEnd(14)} ${show(g.figure, g.early).padStart(9)} → ${show(g.figure, g.late).padStart(9)}  ${g.growth >= 0 ? '+' : ''}${(g.growth * 100).toFixed(1)}%${g.failed ? '  FAIL' : ''}`,
  );
say('');
say(formatAuditReport(result.audit));
say(`samples and picture: ${path.join(outDir, 'samples.json')}, ${path.join(outDir, 'soak.svg')}`);
if (result.failures.length > 0) {
  say(`\nsoak FAILED:\n${result.failures.map((f) => `  ${f}`).join('\n')}`);
  process.exit(1);
}
say('\nsoak passed');
process.exit(0);
