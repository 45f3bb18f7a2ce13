// The bench's knobs: flags first, then BENCH_* environment variables, then the
// defaults, which fit a full run in well under ten minutes on 2 cores.
// `--quick` is a smoke run (about a minute and a half): same phases, short.

import { type Command, InvalidArgumentError, Option } from 'commander';
import { numberOption, parseTool, toolCommand } from '../command.js';

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

/** Each knob's default in a full run and in a --quick one: the help says what the run uses. */
const DEFAULTS = {
  duration: { full: 10, quick: 2 },
  warmup: { full: 2, quick: 0.5 },
  messages: { full: 20_000, quick: 20_000 },
  deliveries: { full: 2000, quick: 300 },
  bulk: { full: 10_000, quick: 500 },
  large: { full: 1_000_000, quick: 100_000 },
} as const;
type Knob = keyof typeof DEFAULTS;
const defaultOf = (knob: Knob, quick: boolean) => DEFAULTS[knob][quick ? 'quick' : 'full'];
const defaultText = (knob: Knob) => {
  const { full, quick } = DEFAULTS[knob];
  return full === quick ? `default ${full}` : `default ${full}; ${quick} with --quick`;
};

/** The bench's command line; each flag may come from its BENCH_* variable instead. */
function benchCommand(): Command {
  const knob = (flag: string, description: string, env: string, min: number, whole = true) =>
    numberOption(flag, description, min, whole).env(env);
  return toolCommand('bench', 'Measures Handset on this machine, each figure beside its baseline from the same run.')
    .addOption(
      knob(
        '--duration <seconds>',
        `seconds per measurement (${defaultText('duration')})`,
        'BENCH_DURATION',
        0.5,
        false,
      ),
    )
    .addOption(
      knob('--warmup <seconds>', `unmeasured seconds before each (${defaultText('warmup')})`, 'BENCH_WARMUP', 0, false),
    )
    .option('--quick', 'smoke run: 2 s phases, small N (env: BENCH_QUICK=1)')
    .addOption(
      new Option('--only <phases>', `phases to run, comma-separated: ${PHASES.join(',')}`)
        .env('BENCH_ONLY')
        .argParser(phaseList),
    )
    .addOption(
      knob(
        '--large <n>',
        `stored carrier events for the large growth point (${defaultText('large')})`,
        'BENCH_LARGE',
        20_000,
      ),
    )
    .addOption(
      knob(
        '--messages <n>',
        `at most this many messages in the sustained pipeline run (${defaultText('messages')})`,
        'BENCH_MESSAGES',
        100,
      ),
    )
    .addOption(
      knob(
        '--deliveries <n>',
        `events in the 8-endpoint delivery run, a quarter of it for 1 endpoint (${defaultText('deliveries')})`,
        'BENCH_DELIVERIES',
        10,
      ),
    )
    .addOption(
      knob(
        '--bulk <n>',
        `messages the bulk-send phase creates through the API, batched dispatch (${defaultText('bulk')})`,
        'BENCH_BULK',
        10,
      ),
    )
    .addOption(
      knob(
        '--bulk-baseline <n>',
        'messages of its baseline in the same run, one job per message (default --bulk)',
        'BENCH_BULK_BASELINE',
        10,
      ),
    )
    .addOption(
      knob(
        '--bulk-paced <n>',
        'messages of the paced campaign, mps 50 on each of 4 numbers (default --bulk; 0: skip)',
        'BENCH_BULK_PACED',
        0,
      ),
    )
    .option('--profile', 'run the Handset processes under node --cpu-prof; profiles go to <out>/profiles')
    .option('--out <dir>', 'where the JSON goes', 'bench/results')
    .addHelpText(
      'after',
      '\nDATABASE_URL set: a fresh database on that server, dropped afterwards; unset: embedded PostgreSQL.',
    );
}

function phaseList(text: string): Phase[] {
  const phases = text.split(',').map((p) => p.trim());
  const unknown = phases.find((p) => !(PHASES as readonly string[]).includes(p));
  if (unknown !== undefined)
    throw new InvalidArgumentError(`unknown phase "${unknown}" (phases: ${PHASES.join(', ')})`);
  return phases as Phase[];
}

interface BenchFlags {
  duration?: number;
  warmup?: number;
  quick?: boolean;
  only?: Phase[];
  large?: number;
  messages?: number;
  deliveries?: number;
  bulk?: number;
  bulkBaseline?: number;
  bulkPaced?: number;
  profile?: boolean;
  out: string;
}

/** The options, or a clear word and the usage on stderr and exit 2: a mistyped flag starts nothing. */
export function parseOptions(argv: string[]): BenchOptions {
  const flags = parseTool<BenchFlags>(benchCommand(), argv);
  // Not commander's .env(): that would take BENCH_QUICK=0 for a yes.
  const quick = flags.quick ?? ['1', 'true'].includes(process.env['BENCH_QUICK'] ?? '');
  const bulkMessages = flags.bulk ?? defaultOf('bulk', quick);
  return {
    duration: flags.duration ?? defaultOf('duration', quick),
    warmup: flags.warmup ?? defaultOf('warmup', quick),
    concurrencies: [1, 16, 64],
    pipelineRate: 50,
    pipelineMessages: flags.messages ?? defaultOf('messages', quick),
    pipelineWindow: 64,
    pipelineConcurrency: 16,
    deliveries: flags.deliveries ?? defaultOf('deliveries', quick),
    bulkMessages,
    bulkBaselineMessages: flags.bulkBaseline ?? bulkMessages,
    bulkPacedMessages: flags.bulkPaced ?? bulkMessages,
    growthSmall: 10_000,
    growthLarge: flags.large ?? defaultOf('large', quick),
    processes: [1, 2, 4],
    phases: flags.only ?? [...PHASES],
    profile: flags.profile ?? false,
    outDir: flags.out,
    quick,
  };
}
