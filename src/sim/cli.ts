// `handset sim`: a carrier simulator on its own, Telnyx's or (--carrier twilio)
// Twilio's. Parses flags (one per behaviour knob, e.g. --duplicate-rate 0.5,
// --drop-rates call.hangup=1), starts it, prints the values a platform needs
// (TELNYX_API_URL, TELNYX_API_KEY, TELNYX_PUBLIC_KEY; or TWILIO_ACCOUNT_SID,
// TWILIO_AUTH_TOKEN, TWILIO_API_URL) and runs until SIGINT or SIGTERM.

import { createPrivateKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Command, type OptionValues } from 'commander';
import type { Logger } from 'pino';
import { EXIT, helpOf, parseAlone, UsageError } from '../cli/command.js';
import {
  BEHAVIOUR_KEYS,
  BehaviourError,
  checkBehaviour,
  describeBehaviour,
  KNOB_HELP,
  knobFlag,
  knobKind,
  parseBehaviour,
  parseRatesFlag,
  type Behaviour,
  WELL_BEHAVED,
} from './behaviour.js';
import { EVENT_TYPES } from './events.js';
import type { SimulatorOptions } from './simulator.js';

export const SIM_DEFAULT_PORT = 3002;
export const SIM_DEFAULT_WEBHOOK_URL = 'http://127.0.0.1:3001/webhooks/telnyx';
export const SIM_CARRIERS = ['telnyx', 'twilio'] as const;
export type SimCarrier = (typeof SIM_CARRIERS)[number];

/** `handset sim`: its flags, one per behaviour knob (no action: the caller attaches one). */
export function simCommand(): Command {
  const cmd = new Command('sim')
    .description(
      'a carrier simulator on its own (Telnyx by default); prints the TELNYX_* (or TWILIO_*) settings that point Handset at it',
    )
    .option('--carrier <name>', `which carrier to be: ${SIM_CARRIERS.join(' or ')}`, 'telnyx')
    .option('--port <n>', `control API port (0 = any free port)`, String(SIM_DEFAULT_PORT))
    .option(
      '--api-port <n>',
      'the carrier REST API port, what TELNYX_API_URL or TWILIO_API_URL points at (default: any free port)',
      '0',
    )
    .option('--host <addr>', 'bind address', '127.0.0.1')
    .option(
      '--webhook-url <url>',
      `where webhooks go ("" = nowhere; default ${SIM_DEFAULT_WEBHOOK_URL}, or …/webhooks/twilio)`,
    )
    .option('--api-key <key>', 'the Bearer key to accept, or with --carrier twilio the auth token (default: generated)')
    .option('--key-file <path>', 'Ed25519 private key (PEM); created if missing, so the public key survives restarts')
    .option('--connection-id <id>', 'the only connection_id dials accept (default: any)')
    .option('--seed <seed>', 'seeds every decision (default: random, printed)')
    .option('--time-scale <x>', 'multiplies simulated delays (0.01 = 100x faster)', '1');
  for (const k of BEHAVIOUR_KEYS) {
    const arg = { rate: 'P', delay: 'MS', rates: 'TYPE=P,…' }[knobKind(k)];
    cmd.option(`--${knobFlag(k)} <${arg}>`, KNOB_HELP[k]);
  }
  return cmd.addHelpText(
    'after',
    [
      '',
      'Misbehaviour knobs all default to 0 (a well-behaved carrier): P is a probability 0..1, MS real milliseconds,',
      // Wrapped to the width help keeps (the list grows with the event types).
      ...wrap(`TYPE one of ${EVENT_TYPES.join(', ')}.`, 110),
      'Per-number misbehaviour (a persona\'s lose/hold, recording: "error") is set with PUT /_sim/personas/{number}.',
    ].join('\n'),
  );
}

/** Splits text at spaces into lines of at most `width` characters. */
function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(' ')) {
    if (line && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else line = line ? `${line} ${word}` : word;
  }
  if (line) lines.push(line);
  return lines;
}

export const SIM_USAGE = helpOf(simCommand);

export interface SimArgs {
  carrier: SimCarrier;
  options: SimulatorOptions;
  keyFile: string | null;
}

export class SimUsageError extends UsageError {
  override name = 'SimUsageError';
}

/** The simulator's options from `handset sim`'s parsed flags; a bad value is a SimUsageError. */
export function simArgs(v: OptionValues): SimArgs {
  const text = (name: string) => (typeof v[name] === 'string' ? (v[name] as string) : undefined);

  const knobs: Record<string, unknown> = {};
  let behaviour: Partial<Behaviour>;
  try {
    for (const k of BEHAVIOUR_KEYS) {
      const flag = `--${knobFlag(k)}`;
      const raw = text(k);
      if (raw !== undefined) knobs[k] = knobKind(k) === 'rates' ? parseRatesFlag(flag, raw) : number(flag, raw);
    }
    behaviour = parseBehaviour(knobs);
    checkBehaviour({ ...WELL_BEHAVED, ...behaviour });
  } catch (err) {
    if (err instanceof BehaviourError || err instanceof SimUsageError) throw new SimUsageError(err.message);
    throw err;
  }

  const port = number('--port', text('port') ?? String(SIM_DEFAULT_PORT));
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new SimUsageError('--port must be 0..65535');
  const timeScale = number('--time-scale', text('timeScale') ?? '1');
  if (!(timeScale > 0)) throw new SimUsageError('--time-scale must be a positive number');
  const carrier = text('carrier') ?? 'telnyx';
  if (!(SIM_CARRIERS as readonly string[]).includes(carrier)) {
    throw new SimUsageError(`--carrier must be ${SIM_CARRIERS.join(' or ')}, got "${carrier}"`);
  }
  const apiPort = number('--api-port', text('apiPort') ?? '0');
  if (!Number.isInteger(apiPort) || apiPort < 0 || apiPort > 65535)
    throw new SimUsageError('--api-port must be 0..65535');
  const webhookUrl = text('webhookUrl') ?? SIM_DEFAULT_WEBHOOK_URL.replace('/webhooks/telnyx', `/webhooks/${carrier}`);

  const options: SimulatorOptions = {
    port,
    apiPort,
    timeScale,
    webhookUrl: webhookUrl === '' ? null : webhookUrl,
    behaviour,
  };
  const host = text('host');
  if (host !== undefined) options.host = host;
  const apiKey = text('apiKey');
  if (apiKey !== undefined) options.apiKey = apiKey;
  const seed = text('seed');
  if (seed !== undefined) options.seed = seed;
  const connectionId = text('connectionId');
  if (connectionId !== undefined) options.connectionId = connectionId;
  return { carrier: carrier as SimCarrier, options, keyFile: text('keyFile') ?? null };
}

/** `handset sim …`'s arguments on their own (`--help` is a SimUsageError here: there is nothing to run). */
export function parseSimArgs(args: string[]): SimArgs {
  let parsed: ReturnType<typeof parseAlone>;
  try {
    parsed = parseAlone(simCommand, args);
  } catch (err) {
    if (err instanceof UsageError) throw new SimUsageError(err.message);
    throw err;
  }
  if (parsed === 'help') throw new SimUsageError('--help asks for the usage, not a simulator');
  return simArgs(parsed.opts());
}

function number(flag: string, raw: string): number {
  const n = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(n)) throw new SimUsageError(`${flag} must be a number, got "${raw}"`);
  return n;
}

/** Loads the simulator's signing key, or creates and saves one (PEM, mode 600). */
export async function loadOrCreateKey(file: string): Promise<KeyObject> {
  if (existsSync(file)) return createPrivateKey(await readFile(file, 'utf8'));
  const { privateKey } = generateKeyPairSync('ed25519');
  await mkdir(path.dirname(file), { recursive: true });
  await writeFile(file, privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
  return privateKey;
}

export interface SimCommandIo {
  stdout: { write(text: string): unknown };
  stderr: { write(text: string): unknown };
  /** Where SIGINT/SIGTERM arrive (the process, or an emitter in tests). */
  signals: {
    once(signal: 'SIGINT' | 'SIGTERM', fn: () => void): unknown;
    off(signal: 'SIGINT' | 'SIGTERM', fn: () => void): unknown;
  };
}

/** `handset sim` from its arguments alone: 2 with the usage on a usage error, 0 after --help. */
export async function runSimCommand(args: string[], log: Logger, io: Partial<SimCommandIo> = {}): Promise<number> {
  const stdout = io.stdout ?? process.stdout;
  const stderr = io.stderr ?? process.stderr;
  try {
    const parsed = parseAlone(simCommand, args);
    if (parsed === 'help') {
      stdout.write(SIM_USAGE);
      return EXIT.ok;
    }
    return await runSim(simArgs(parsed.opts()), log, io);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    stderr.write(`handset sim: ${err.message}\n\n${SIM_USAGE}`);
    return EXIT.usage;
  }
}

/** Resolves on the first SIGINT or SIGTERM (listening from now on). */
function untilSignal(signals: NonNullable<SimCommandIo['signals']>): Promise<void> {
  return new Promise<void>((resolve) => {
    const stop = () => {
      signals.off('SIGINT', stop);
      signals.off('SIGTERM', stop);
      resolve();
    };
    signals.once('SIGINT', stop);
    signals.once('SIGTERM', stop);
  });
}

/** Runs the simulator until a signal; resolves to the exit code. */
export async function runSim(parsed: SimArgs, log: Logger, io: Partial<SimCommandIo> = {}): Promise<number> {
  const stdout = io.stdout ?? process.stdout;
  const signals = io.signals ?? process;
  const options: SimulatorOptions = { ...parsed.options, log };
  if (parsed.carrier === 'twilio') return runTwilioSim(options, stdout, signals);
  if (parsed.keyFile) options.privateKey = await loadOrCreateKey(parsed.keyFile);
  // Loaded here, not with the command: `handset --help` need not load a simulator.
  const { startSimulator } = await import('./simulator.js');
  const sim = await startSimulator(options);

  // Listen for the stop signal before printing that we listen: a signal sent
  // on that line must close the simulator cleanly.
  const stopped = untilSignal(signals);
  const rumours = describeBehaviour(sim.behaviour);
  stdout.write(
    [
      `Telnyx simulator listening (seed ${sim.seed}, time scale ${sim.timeScale})`,
      ...Object.entries(sim.carrierEnv()).map(([name, value]) => `  ${name}=${value}`),
      `  webhooks  → ${sim.webhookUrl ?? '(none: only per-message/per-call webhook_url)'}`,
      `  control   → ${sim.controlUrl}/state`,
      `  behaviour → ${rumours.length === 0 ? 'well-behaved' : rumours.join(' ')}`,
      '',
    ].join('\n'),
  );

  await stopped;
  await sim.close();
  return 0;
}

/** `handset sim --carrier twilio`: the Twilio simulator until a signal. */
async function runTwilioSim(
  o: SimulatorOptions,
  stdout: { write(text: string): unknown },
  signals: NonNullable<SimCommandIo['signals']>,
): Promise<number> {
  const { startTwilioSimulator } = await import('./twilio/simulator.js');
  const sim = await startTwilioSimulator({
    ...(o.port !== undefined ? { port: o.port } : {}),
    ...(o.apiPort !== undefined ? { apiPort: o.apiPort } : {}),
    ...(o.host !== undefined ? { host: o.host } : {}),
    ...(o.apiKey !== undefined ? { authToken: o.apiKey } : {}),
    ...(o.seed !== undefined ? { seed: o.seed } : {}),
    ...(o.behaviour ? { behaviour: o.behaviour } : {}),
    ...(o.log ? { log: o.log } : {}),
    smsUrl: o.webhookUrl ?? null,
    timeScale: o.timeScale ?? 1,
  });
  const stopped = untilSignal(signals);
  const state = sim.state() as { smsUrl: string | null };
  stdout.write(
    [
      `Twilio simulator listening (seed ${sim.seed})`,
      ...Object.entries(sim.carrierEnv()).map(([name, value]) => `  ${name}=${value}`),
      `  inbound   → ${state.smsUrl ?? '(none)'}  (status callbacks go to each message's StatusCallback)`,
      `  control   → ${sim.controlUrl}/state`,
      '',
    ].join('\n'),
  );
  await stopped;
  await sim.close();
  return 0;
}
