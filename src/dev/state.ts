// What a running `handset dev` tells the other local tools (listen, trigger,
// audit): where the API, the simulator and the database are, and the demo
// credentials. Lives in <state dir>/dev.json, readable only by its owner.

import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { CarrierEnv } from '../sim/simulator.js';
import type { TwilioCarrierEnv } from '../sim/twilio/simulator.js';

export interface DevState {
  apiUrl: string;
  ingestUrl: string;
  simUrl: string;
  simControlUrl: string;
  /** The Twilio simulator's control API, and the demo account's number there (absent in a dev.json from before Twilio). */
  twilioSimControlUrl?: string;
  twilioNumber?: string;
  /** The settings that point a tool at dev's Twilio simulator. */
  twilioCarrier?: TwilioCarrierEnv;
  databaseUrl: string;
  accountId: string;
  apiKey: string;
  number: string;
  /** The settings that point a tool at dev's simulator as its carrier (`handset reconcile`). */
  carrier: CarrierEnv;
  pid: number;
}

const file = (stateDir: string) => path.join(stateDir, 'dev.json');

export async function readDevState(stateDir: string): Promise<DevState | null> {
  try {
    return JSON.parse(await readFile(file(stateDir), 'utf8')) as DevState;
  } catch {
    return null;
  }
}

export async function writeDevState(stateDir: string, state: DevState): Promise<void> {
  await writeFile(file(stateDir), `${JSON.stringify(state, null, 2)}\n`, { mode: 0o600 });
}

/** Whether a process with this id still runs (a dev.json can outlive its dev). */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The dev.json of a `handset dev` still running, or null. */
export async function runningDev(stateDir: string): Promise<DevState | null> {
  const dev = await readDevState(stateDir);
  return dev && isAlive(dev.pid) ? dev : null;
}

const START_DEV = 'start it with npm start';

/** Why a fetch failed, in a word: ECONNREFUSED rather than "fetch failed". */
export function networkReason(err: unknown): string {
  const cause = (err as Error).cause as NodeJS.ErrnoException | undefined;
  return cause?.code ?? cause?.message ?? (err as Error).message;
}

/**
 * The API to talk to: flags and environment win, else the running dev platform.
 * It must answer, so that a tool that needs it fails at once with what to do
 * rather than with "fetch failed" halfway.
 */
export async function resolveApi(
  stateDir: string,
  flags: { apiUrl?: string | undefined; apiKey?: string | undefined },
) {
  const dev = await readDevState(stateDir);
  const given = flags.apiUrl ?? process.env.HANDSET_API_URL;
  const apiUrl = (given ?? dev?.apiUrl)?.replace(/\/+$/, '');
  const apiKey = flags.apiKey ?? process.env.HANDSET_API_KEY ?? dev?.apiKey;
  if (!apiUrl) {
    throw new Error(`no handset dev running (none in ${stateDir}: ${START_DEV}, or pass --api-url and --api-key)`);
  }
  const noDev = `no handset dev running at ${apiUrl} (${START_DEV})`;
  if (!given && dev && !isAlive(dev.pid)) throw new Error(noDev);
  if (!apiKey) throw new Error(`no API key for ${apiUrl}: pass --api-key (or set HANDSET_API_KEY)`);
  try {
    await fetch(`${apiUrl}/healthz`, { signal: AbortSignal.timeout(5_000) });
  } catch (err) {
    if (!given) throw new Error(noDev, { cause: err });
    throw new Error(`no Handset API answers at ${apiUrl} (${networkReason(err)})`, { cause: err });
  }
  return { apiUrl, apiKey, dev };
}
