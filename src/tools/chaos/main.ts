// `npm run chaos`: the full storm (hundreds of messages and calls, worker
// processes SIGKILLed at random, webhooks lost and held back, the database cut at
// random for up to 30 s), then the audit and the comparison with a well-behaved
// carrier. Exits 1 on any violation, difference or process that exited on its own.
// Then the customer's side: the example receiver behind @handset/inbox, SIGKILLed mid-storm (inbox.ts).
// With --failover, instead: PostgreSQL failover mid-storm (failover.ts); exits 1 when sync mode lost an
// acknowledged event, or either mode left an audit violation or a process that exited.

import { Option } from 'commander';
import { createLogger } from '../../telemetry/log.js';
import { CHAOS_DEFAULTS, chaosTable, formatAuditReport, runChaos } from './chaos.js';
import {
  FAILOVER_DEFAULTS,
  type FailoverResult,
  failoverTable,
  type ReplicationMode,
  runFailover,
} from './failover.js';
import { inboxChaosPhase } from './inbox.js';
import { numberOption, parseTool, toolCommand } from '../command.js';

const count = (flag: string, description: string) => numberOption(flag, description, 0);
const cmd = toolCommand(
  'chaos',
  'The storm: a misbehaving carrier, workers SIGKILLed, the database cut; then the audit and the customer’s side.',
)
  .addOption(
    count('--messages <n>', `outbound messages (default ${CHAOS_DEFAULTS.outboundMessages}; a third as many inbound)`),
  )
  .addOption(count('--calls <n>', `outbound calls (default ${CHAOS_DEFAULTS.outboundCalls}; half as many inbound)`))
  .addOption(count('--twilio-messages <n>', `messages sent through Twilio (default ${CHAOS_DEFAULTS.twilioMessages})`))
  .addOption(
    count(
      '--failover-messages <n>',
      `messages with a fallback number on the other carrier (default ${CHAOS_DEFAULTS.failoverMessages})`,
    ),
  )
  .addOption(
    count(
      '--campaign-messages <n>',
      `a campaign through POST /v1/messages/batch from a paced number (default ${CHAOS_DEFAULTS.campaignMessages})`,
    ),
  )
  .addOption(count('--workers <n>', `worker processes, SIGKILLed at random (default ${CHAOS_DEFAULTS.workers})`))
  .addOption(count('--ingest-processes <n>', `ingest processes (default ${CHAOS_DEFAULTS.ingestProcesses})`))
  .addOption(count('--load-seconds <n>', `how long the storm sends (default ${CHAOS_DEFAULTS.loadMs / 1000})`))
  .option('--seed <seed>', 'the storm’s seed: the same seed makes the same misbehaviour (default chaos-<now>)')
  .option('--no-db-cuts', 'never cut the database')
  .option('--no-flap', 'Telnyx’s REST API never goes down')
  .option('--inbox-only', 'only the customer’s side: the example receiver behind @handset/inbox')
  .option('--failover', 'instead: PostgreSQL failover mid-storm')
  .addOption(
    new Option('--mode <mode>', 'the failover’s replication').choices(['sync', 'async', 'both']).default('both'),
  )
  .addHelpText(
    'after',
    '\nDATABASE_URL set: databases on that server; unset: embedded PostgreSQL. LOG_LEVEL: the processes’ logs (default silent).\n' +
      'Exits 0 when the audit is clean and every message and call ended as with a well-behaved carrier; 1 otherwise.',
  );
const values = parseTool<{
  messages?: number;
  calls?: number;
  twilioMessages?: number;
  failoverMessages?: number;
  campaignMessages?: number;
  workers?: number;
  ingestProcesses?: number;
  loadSeconds?: number;
  seed?: string;
  dbCuts: boolean;
  flap: boolean;
  inboxOnly?: boolean;
  failover?: boolean;
  mode: 'sync' | 'async' | 'both';
}>(cmd, process.argv.slice(2));
const { messages, calls } = values;
const seed = values.seed ?? `chaos-${Date.now()}`;
const say = (line: string) => process.stdout.write(`${line}\n`);
if (values.failover) {
  const modes: ReplicationMode[] = values.mode === 'both' ? ['sync', 'async'] : [values.mode];
  const results: FailoverResult[] = [];
  for (const m of modes) {
    const result = await runFailover({
      ...FAILOVER_DEFAULTS,
      outboundMessages: messages ?? FAILOVER_DEFAULTS.outboundMessages,
      inboundMessages: messages ?? FAILOVER_DEFAULTS.inboundMessages,
      outboundCalls: calls ?? FAILOVER_DEFAULTS.outboundCalls,
      inboundCalls: calls === undefined ? FAILOVER_DEFAULTS.inboundCalls : Math.ceil(calls / 2),
      workers: values.workers ?? FAILOVER_DEFAULTS.workers,
      loadMs: (values.loadSeconds ?? FAILOVER_DEFAULTS.loadMs / 1000) * 1000,
      mode: m,
      seed: `${seed}-${m}`,
      log: createLogger(process.env.LOG_LEVEL ?? 'silent'),
      out: say,
    });
    if (!result.audit.ok) say(formatAuditReport(result.audit));
    results.push(result);
  }
  say(`\n${failoverTable(results)}`);
  const bad = results.some(
    (r) =>
      r.unexpectedExits.length > 0 ||
      r.unhandledRejections > 0 ||
      r.storedTwice > 0 ||
      r.unfinished > 0 ||
      // What async replication loses is measured, not a failure; the audit then sees its traces.
      r.timings.firstProcessed === null ||
      r.timings.firstProcessed - r.timings.switched > r.resumeBoundMs ||
      (r.mode === 'sync' && (!r.audit.ok || r.lost > 0 || r.apiCreatesLost > 0)),
  );
  process.exit(bad ? 1 : 0);
}
if (values.inboxOnly) process.exit(await inboxChaosPhase(seed, createLogger(process.env.LOG_LEVEL ?? 'silent'), say));

const result = await runChaos({
  ...CHAOS_DEFAULTS,
  outboundMessages: messages ?? CHAOS_DEFAULTS.outboundMessages,
  inboundMessages: Math.ceil((messages ?? CHAOS_DEFAULTS.outboundMessages) / 3),
  outboundCalls: calls ?? CHAOS_DEFAULTS.outboundCalls,
  inboundCalls: Math.ceil((calls ?? CHAOS_DEFAULTS.outboundCalls) / 2),
  workers: values.workers ?? CHAOS_DEFAULTS.workers,
  ingestProcesses: values.ingestProcesses ?? CHAOS_DEFAULTS.ingestProcesses,
  loadMs: (values.loadSeconds ?? CHAOS_DEFAULTS.loadMs / 1000) * 1000,
  ...(!values.dbCuts ? { dbCutEveryMs: [0, 0] as [number, number] } : {}),
  twilioMessages: values.twilioMessages ?? CHAOS_DEFAULTS.twilioMessages,
  failoverMessages: values.failoverMessages ?? CHAOS_DEFAULTS.failoverMessages,
  campaignMessages: values.campaignMessages ?? CHAOS_DEFAULTS.campaignMessages,
  ...(!values.flap ? { flapEveryMs: [0, 0] as [number, number] } : {}),
  seed,
  databaseUrl: process.env.DATABASE_URL ?? null,
  log: createLogger(process.env.LOG_LEVEL ?? 'silent'),
  out: (line) => process.stdout.write(`${line}\n`),
});

process.stdout.write(`\n${chaosTable(result)}\n\n${formatAuditReport(result.audit)}\n`);
if (result.mismatches.length > 0) {
  process.stdout.write(
    `\ndifferences from a well-behaved carrier:\n${result.mismatches
      .slice(0, 20)
      .map((m) => `  ${m}`)
      .join('\n')}\n`,
  );
}
const inboxExit = await inboxChaosPhase(seed, createLogger(process.env.LOG_LEVEL ?? 'silent'), say);
process.exit(
  result.audit.ok && result.mismatches.length === 0 && result.unexpectedExits === 0 && inboxExit === 0 ? 0 : 1,
);
