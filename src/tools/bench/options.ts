// The bench's knobs: flags first, then BENCH_* environment variables, then the
// defaults, which fit a full run in well under ten minutes on 2 cores.
// `--quick` is a smoke run (about a minute and a half): same phases, short.

import { parseFlags, usageError } from '../flags.js';

export const PHASES = ['ingest', 'pipeline', 'delivery', 'bulk', 'growth', 'scale', 'inbox'] as const;
export type Phase = (typeof PHASES)[number];

export interface BenchOptions {
  /** Seconds each measurement runs. */
  duration: number;
  /** Seconds of unmeasured load before each measurement (connections, JIT). */
  warmup: number;
  concurrencies: number[];
  /** Messages per second in the paced pipeline runs (receipts arrive at twice this). */
  pipelineRate: number;
  /** At most this many messages in the sustained pipeline run. */
  pipelineMessages: number;
  /** Messages kept between receipt and customer webhook in the sustained run. */
  pipelineWindow: number;
  pipelineConcurrency: number;
  /** Outbound events in the delivery run. */
  deliveries: number;
  /** Messages the bulk-send phase creates through the API, through the batched dispatcher. */
  bulkMessages: number;
  /** Messages of the same run's baseline: one job per message, the old path. */
  bulkBaselineMessages: number;
  /** Messages of the paced campaign (mps 50 on each of 4 numbers); 0: not run. */
  bulkPacedMessages: number;
  /** Stored carrier events for the two cost-growth points. */
  growthSmall: number;
  growthLarge: number;
  /** Ingest processes for the scale-out figure. */
  processes: number[];
  phases: Phase[];
  /** Run the Handset processes under `node --cpu-prof`, profiles next to the results. */
  profile: boolean;
  outDir: string;
  quick: boolean;
}

const USAGE = `usage: npm run bench -- [options]

  --duration S      seconds per measurement (BENCH_DURATION, default 10)
  --warmup S        unmeasured seconds before each (BENCH_WARMUP, default 2)
  --quick           smoke run: 2 s phases, small N (BENCH_QUICK=1)
  --only LIST       phases to run: ${PHASES.join(',')} (BENCH_ONLY)
  --large N         stored carrier events for the large growth point (BENCH_LARGE, default 1000000)
  --messages N      at most this many messages in the sustained pipeline run (BENCH_MESSAGES, default 20000)
  --deliveries N    events in the 8-endpoint delivery run, a quarter of it for 1 endpoint (BENCH_DELIVERIES, default 2000)
  --bulk N          messages the bulk-send phase creates through the API, batched dispatch (BENCH_BULK, default 10000)
  --bulk-baseline N messages of its baseline in the same run, one job per message (BENCH_BULK_BASELINE, default --bulk)
  --bulk-paced N    messages of the paced campaign, mps 50 on each of 4 numbers (BENCH_BULK_PACED, default --bulk; 0: skip)
  --profile         run the Handset processes under node --cpu-prof; profiles go to <out>/profiles
  --out DIR         where the JSON goes (default bench/results)

DATABASE_URL set: a fresh database on that server, dropped afterwards; unset: embedded PostgreSQL.
`;

/** The options, or a clear word and the usage on stderr and exit 2: a mistyped flag starts nothing. */
export function parseOptions(argv: string[], env: NodeJS.ProcessEnv): BenchOptions {
  try {
    return readOptions(argv, env);
  } catch (error) {
    return usageError(USAGE, (error as Error).message);
  }
}

function readOptions(argv: string[], env: NodeJS.ProcessEnv): BenchOptions {
  const values = parseFlags(USAGE, {
    args: argv,
    options: {
      duration: { type: 'string' },
      warmup: { type: 'string' },
      quick: { type: 'boolean' },
      only: { type: 'string' },
      large: { type: 'string' },
      messages: { type: 'string' },
      deliveries: { type: 'string' },
      bulk: { type: 'string' },
      'bulk-baseline': { type: 'string' },
      'bulk-paced': { type: 'string' },
      profile: { type: 'boolean' },
      out: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  const quick = values.quick ?? ['1', 'true'].includes(env['BENCH_QUICK'] ?? '');
  const num = (flag: string | undefined, name: string, fallback: number, min: number): number => {
    const text = flag ?? env[name];
    if (text === undefined || text === '') return fallback;
    const v = Number(text);
    if (!Number.isFinite(v) || v < min)
      throw new Error(`${name.replace('BENCH_', '--').toLowerCase()}: expected a number ≥ ${min}, got "${text}"`);
    return v;
  };
  const onlyText = values.only ?? env['BENCH_ONLY'];
  const phases = onlyText ? onlyText.split(',').map((p) => p.trim()) : [...PHASES];
  for (const p of phases) {
    if (!(PHASES as readonly string[]).includes(p))
      throw new Error(`--only: unknown phase "${p}" (phases: ${PHASES.join(', ')})`);
  }
  const bulkMessages = Math.round(num(values.bulk, 'BENCH_BULK', quick ? 500 : 10_000, 10));
  return {
    duration: num(values.duration, 'BENCH_DURATION', quick ? 2 : 10, 0.5),
    warmup: num(values.warmup, 'BENCH_WARMUP', quick ? 0.5 : 2, 0),
    concurrencies: [1, 16, 64],
    pipelineRate: 50,
    pipelineMessages: Math.round(num(values.messages, 'BENCH_MESSAGES', 20_000, 100)),
    pipelineWindow: 64,
    pipelineConcurrency: 16,
    deliveries: Math.round(num(values.deliveries, 'BENCH_DELIVERIES', quick ? 300 : 2000, 10)),
    bulkMessages,
    bulkBaselineMessages: Math.round(num(values['bulk-baseline'], 'BENCH_BULK_BASELINE', bulkMessages, 10)),
    bulkPacedMessages: Math.round(num(values['bulk-paced'], 'BENCH_BULK_PACED', bulkMessages, 0)),
    growthSmall: 10_000,
    growthLarge: Math.round(num(values.large, 'BENCH_LARGE', quick ? 100_000 : 1_000_000, 20_000)),
    processes: [1, 2, 4],
    phases: phases as Phase[],
    profile: values.profile ?? false,
    outDir: values.out ?? 'bench/results',
    quick,
  };
}
