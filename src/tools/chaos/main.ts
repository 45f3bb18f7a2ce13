// `npm run chaos`: the full storm (hundreds of messages and calls, worker
// processes SIGKILLed at random, webhooks lost and held back, the database cut at
// random for up to 30 s), then the audit and the comparison with a well-behaved
// carrier. Exits 1 on any violation, difference or process that exited on its own.
// Then the customer's side: the example receiver behind @handset/inbox, SIGKILLed mid-storm (inbox.ts).
// With --failover, instead: PostgreSQL failover mid-storm (failover.ts); exits 1 when sync mode lost an
// acknowledged event, or either mode left an audit violation or a process that exited.

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
import { parseFlags, usageError } from '../flags.js';

const USAGE = `usage: npm run chaos -- [options]

  --messages N           outbound messages (default ${CHAOS_DEFAULTS.outboundMessages}; a third as many inbound)
  --calls N              outbound calls (default ${CHAOS_DEFAULTS.outboundCalls}; half as many inbound)
  --twilio-messages N    messages sent through Twilio (default ${CHAOS_DEFAULTS.twilioMessages})
  --failover-messages N  messages with a fallback number on the other carrier (default ${CHAOS_DEFAULTS.failoverMessages})
  --campaign-messages N  a campaign through POST /v1/messages/batch from a paced number (default ${CHAOS_DEFAULTS.campaignMessages})
  --workers N            worker processes, SIGKILLed at random (default ${CHAOS_DEFAULTS.workers})
  --ingest-processes N   ingest processes (default ${CHAOS_DEFAULTS.ingestProcesses})
  --load-seconds N       how long the storm sends (default ${CHAOS_DEFAULTS.loadMs / 1000})
  --seed S               the storm's seed: the same seed makes the same misbehaviour (default chaos-<now>)
  --no-db-cuts           never cut the database
  --no-flap              Telnyx's REST API never goes down
  --inbox-only           only the customer's side: the example receiver behind @handset/inbox
  --failover             instead: PostgreSQL failover mid-storm
  --mode sync|async|both the failover's replication (default both)

DATABASE_URL set: databases on that server; unset: embedded PostgreSQL. LOG_LEVEL: the processes' logs (default silent).
Exits 0 when the audit is clean and every message and call ended as with a well-behaved carrier; 1 otherwise.
`;

const values = parseFlags(USAGE, {
  options: {
    help: { type: 'boolean', short: 'h' },
    messages: { type: 'string' },
    calls: { type: 'string' },
    workers: { type: 'string' },
    'ingest-processes': { type: 'string' },
    'load-seconds': { type: 'string' },
    seed: { type: 'string' },
    'no-db-cuts': { type: 'boolean' },
    'inbox-only': { type: 'boolean' },
    'twilio-messages': { type: 'string' },
    'failover-messages': { type: 'string' },
    'campaign-messages': { type: 'string' },
    'no-flap': { type: 'boolean' },
    failover: { type: 'boolean' },
    mode: { type: 'string' },
  },
});
/** A flag's whole number, if given; anything else stops the run before it starts. */
function whole(name: keyof typeof values): number | undefined {
  const text = values[name];
  if (text === undefined) return undefined;
  if (typeof text !== 'string' || !/^\d+$/.test(text)) {
    return usageError(USAGE, `--${name}: expected a whole number ≥ 0, got ${JSON.stringify(text)}`);
  }
  return Number(text);
}
const messages = whole('messages');
const calls = whole('calls');
const seed = values.seed ?? `chaos-${Date.now()}`;
const say = (line: string) => process.stdout.write(`${line}\n`);
if (values.failover) {
  const mode = values.mode ?? 'both';
  if (!['sync', 'async', 'both'].includes(mode)) {
    usageError(USAGE, `--mode must be sync, async or both, not ${mode}`);
  }
  const modes: ReplicationMode[] = mode === 'both' ? ['sync', 'async'] : [mode as ReplicationMode];
  const results: FailoverResult[] = [];
  for (const m of modes) {
    const result = await runFailover({
      ...FAILOVER_DEFAULTS,
      outboundMessages: messages ?? FAILOVER_DEFAULTS.outboundMessages,
      inboundMessages: messages ?? FAILOVER_DEFAULTS.inboundMessages,
      outboundCalls: calls ?? FAILOVER_DEFAULTS.outboundCalls,
      inboundCalls: calls === undefined ? FAILOVER_DEFAULTS.inboundCalls : Math.ceil(calls / 2),
      workers: whole('workers') ?? FAILOVER_DEFAULTS.workers,
      loadMs: (whole('load-seconds') ?? FAILOVER_DEFAULTS.loadMs / 1000) * 1000,
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
if (values['inbox-only'])
  process.exit(await inboxChaosPhase(seed, createLogger(process.env.LOG_LEVEL ?? 'silent'), say));

const result = await runChaos({
  ...CHAOS_DEFAULTS,
  outboundMessages: messages ?? CHAOS_DEFAULTS.outboundMessages,
  inboundMessages: Math.ceil((messages ?? CHAOS_DEFAULTS.outboundMessages) / 3),
  outboundCalls: calls ?? CHAOS_DEFAULTS.outboundCalls,
  inboundCalls: Math.ceil((calls ?? CHAOS_DEFAULTS.outboundCalls) / 2),
  workers: whole('workers') ?? CHAOS_DEFAULTS.workers,
  ingestProcesses: whole('ingest-processes') ?? CHAOS_DEFAULTS.ingestProcesses,
  loadMs: (whole('load-seconds') ?? CHAOS_DEFAULTS.loadMs / 1000) * 1000,
  ...(values['no-db-cuts'] ? { dbCutEveryMs: [0, 0] as [number, number] } : {}),
  twilioMessages: whole('twilio-messages') ?? CHAOS_DEFAULTS.twilioMessages,
  failoverMessages: whole('failover-messages') ?? CHAOS_DEFAULTS.failoverMessages,
  campaignMessages: whole('campaign-messages') ?? CHAOS_DEFAULTS.campaignMessages,
  ...(values['no-flap'] ? { flapEveryMs: [0, 0] as [number, number] } : {}),
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
