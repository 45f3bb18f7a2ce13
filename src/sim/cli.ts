// `handset sim`: the Telnyx simulator on its own. Parses flags (one per behaviour
// knob, e.g. --duplicate-rate 0.5, --drop-rates call.hangup=1), starts it, prints the three values a platform
// needs (TELNYX_API_URL, TELNYX_API_KEY, TELNYX_PUBLIC_KEY) and runs until SIGINT
// or SIGTERM.

import { createPrivateKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { parseArgs } from 'node:util';
import type { Logger } from 'pino';
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
  type BehaviourKey,
  WELL_BEHAVED,
} from './behaviour.js';
import { EVENT_TYPES } from './events.js';
import { startSimulator, type SimulatorOptions } from './simulator.js';

export const SIM_DEFAULT_PORT = 3002;
export const SIM_DEFAULT_WEBHOOK_URL = 'http://127.0.0.1:3001/webhooks/telnyx';

export const SIM_USAGE = `usage: handset sim [options]

  --port N                  listen port (default ${SIM_DEFAULT_PORT}; 0 = any free port)
  --host ADDR               bind address (default 127.0.0.1)
  --webhook-url URL         where webhooks go (default ${SIM_DEFAULT_WEBHOOK_URL}; "" = nowhere)
  --api-key KEY             the Bearer key to accept (default: generated)
  --key-file PATH           Ed25519 private key (PEM); created if missing, so the public key survives restarts
  --connection-id ID        the only connection_id dials accept (default: any)
  --seed SEED               seeds every decision (default: random, printed)
  --time-scale X            multiplies simulated delays (0.01 = 100x faster; default 1)

misbehaviour (all default to 0: a well-behaved carrier; P is a probability 0..1, MS real milliseconds)
${BEHAVIOUR_KEYS.map(knobUsage).join('\n')}
  TYPE is one of ${EVENT_TYPES.slice(0, 3).join(', ')},
                 ${EVENT_TYPES.slice(3).join(', ')}

Per-number misbehaviour (a persona's lose/hold) is set with PUT /_sim/personas/{number}.
`;

function knobUsage(k: BehaviourKey): string {
  const arg = { rate: 'P', delay: 'MS', rates: 'TYPE=P,…' }[knobKind(k)];
  const flag = `  --${knobFlag(k)} ${arg}`;
  return `${flag.padEnd(32)}${KNOB_HELP[k]}`;
}

export interface SimArgs {
  options: SimulatorOptions;
  keyFile: string | null;
  help: boolean;
}

export class SimUsageError extends Error {
  override name = 'SimUsageError';
}

export function parseSimArgs(args: string[]): SimArgs {
  let v: Record<string, string | boolean | undefined>;
  try {
    v = parseArgs({
      args,
      strict: true,
      allowPositionals: false,
      options: {
        port: { type: 'string' },
        host: { type: 'string' },
        'webhook-url': { type: 'string' },
        'api-key': { type: 'string' },
        'key-file': { type: 'string' },
        'connection-id': { type: 'string' },
        seed: { type: 'string' },
        'time-scale': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
        ...Object.fromEntries(BEHAVIOUR_KEYS.map((k) => [knobFlag(k), { type: 'string' as const }])),
      },
    }).values;
  } catch (err) {
    throw new SimUsageError((err as Error).message);
  }
  const text = (name: string) => (typeof v[name] === 'string' ? (v[name] as string) : undefined);

  const knobs: Record<string, unknown> = {};
  let behaviour: Partial<Behaviour>;
  try {
    for (const k of BEHAVIOUR_KEYS) {
      const flag = `--${knobFlag(k)}`;
      const raw = text(knobFlag(k));
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
  const timeScale = number('--time-scale', text('time-scale') ?? '1');
  if (!(timeScale > 0)) throw new SimUsageError('--time-scale must be a positive number');
  const webhookUrl = text('webhook-url') ?? SIM_DEFAULT_WEBHOOK_URL;

  const options: SimulatorOptions = { port, timeScale, webhookUrl: webhookUrl === '' ? null : webhookUrl, behaviour };
  const host = text('host');
  if (host !== undefined) options.host = host;
  const apiKey = text('api-key');
  if (apiKey !== undefined) options.apiKey = apiKey;
  const seed = text('seed');
  if (seed !== undefined) options.seed = seed;
  const connectionId = text('connection-id');
  if (connectionId !== undefined) options.connectionId = connectionId;
  return { options, keyFile: text('key-file') ?? null, help: v['help'] === true };
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

/** Runs until a signal; resolves to the exit code (2 for a usage error). */
export async function runSimCommand(args: string[], log: Logger, io: Partial<SimCommandIo> = {}): Promise<number> {
  const stdout = io.stdout ?? process.stdout;
  const stderr = io.stderr ?? process.stderr;
  const signals = io.signals ?? process;
  let parsed: SimArgs;
  try {
    parsed = parseSimArgs(args);
  } catch (err) {
    if (!(err instanceof SimUsageError)) throw err;
    stderr.write(`handset sim: ${err.message}\n\n${SIM_USAGE}`);
    return 2;
  }
  if (parsed.help) {
    stdout.write(SIM_USAGE);
    return 0;
  }
  const options: SimulatorOptions = { ...parsed.options, log };
  if (parsed.keyFile) options.privateKey = await loadOrCreateKey(parsed.keyFile);
  const sim = await startSimulator(options);

  // Listen for the stop signal before printing that we listen: a signal sent
  // on that line must close the simulator cleanly.
  const stopped = new Promise<void>((resolve) => {
    const stop = () => {
      signals.off('SIGINT', stop);
      signals.off('SIGTERM', stop);
      resolve();
    };
    signals.once('SIGINT', stop);
    signals.once('SIGTERM', stop);
  });
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
