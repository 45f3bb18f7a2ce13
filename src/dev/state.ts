// What a running `handset dev` tells the other local tools (listen, trigger,
// audit, reconcile, accounts): where the API, the simulator and the database are,
// and the demo credentials. Lives in <state dir>/dev.json, readable only by its
// owner. A dev whose state directory is not this checkout's .handset/ (set by
// HANDSET_STATE_DIR) leaves a note of where it is in .handset/elsewhere.json, so
// a command run here with no variables set still finds it.

import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { DEFAULT_STATE_DIR } from '../config.js';
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

/** A handset dev found for a command: its state directory, its dev.json (null: none there) and whether it runs. */
export interface FoundDev {
  stateDir: string;
  dev: DevState | null;
  running: boolean;
}

/** This checkout's .handset/ (the working directory's, as `npm start` runs there). */
const homeStateDir = () => path.resolve(DEFAULT_STATE_DIR);
const noteFile = (home: string) => path.join(home, 'elsewhere.json');

/**
 * The handset dev a command run here talks to. A state directory set by
 * HANDSET_STATE_DIR names it alone; else this checkout's .handset/, or the state
 * directory a dev started here with HANDSET_STATE_DIR elsewhere noted in it, a
 * running one before a stopped one. Found nowhere: the given directory, no dev.
 */
export async function findDev(stateDir: string): Promise<FoundDev> {
  const home = homeStateDir();
  const candidates = [path.resolve(stateDir)];
  if (candidates[0] === home) {
    const noted = await readFile(noteFile(home), 'utf8')
      .then((text) => (JSON.parse(text) as { stateDir?: unknown }).stateDir)
      .catch(() => undefined);
    if (typeof noted === 'string' && noted !== home) candidates.push(noted);
  }
  const found = await Promise.all(
    candidates.map(async (dir) => {
      const dev = await readDevState(dir);
      return { stateDir: dir, dev, running: dev !== null && isAlive(dev.pid) };
    }),
  );
  return found.find((f) => f.running) ?? found.find((f) => f.dev) ?? { stateDir, dev: null, running: false };
}

/**
 * Notes in this checkout's .handset/ where a dev whose state is elsewhere keeps it.
 * A checkout that cannot be written loses only the convenience: HANDSET_STATE_DIR
 * still finds that dev.
 */
export async function noteStateDir(stateDir: string): Promise<void> {
  const home = homeStateDir();
  if (path.resolve(stateDir) === home) return;
  try {
    await mkdir(home, { recursive: true });
    await writeFile(noteFile(home), `${JSON.stringify({ stateDir: path.resolve(stateDir) })}\n`, { mode: 0o600 });
  } catch {
    // nothing to do: see above
  }
}

/** The line a command prints to say which dev it talks to. */
export function talkingTo(found: FoundDev): string {
  if (!found.dev) return `no handset dev in ${found.stateDir}`;
  return found.running
    ? `Using handset dev at ${found.dev.apiUrl} (pid ${found.dev.pid}, state in ${found.stateDir})`
    : `Using the database of the stopped handset dev in ${found.stateDir}`;
}

const START_DEV = 'start it with npm start';

/** Why a fetch failed, in a word: ECONNREFUSED rather than "fetch failed". */
export function networkReason(err: unknown): string {
  const cause = (err as Error).cause as NodeJS.ErrnoException | undefined;
  return cause?.code ?? cause?.message ?? (err as Error).message;
}

/**
 * The API to talk to: flags and environment win, else the handset dev found for
 * this checkout (findDev), whose line says which one. It must answer, so that a
 * tool that needs it fails at once with what to do rather than with "fetch
 * failed" halfway.
 */
export async function resolveApi(
  stateDir: string,
  flags: { apiUrl?: string | undefined; apiKey?: string | undefined },
) {
  const found = await findDev(stateDir);
  const dev = found.dev;
  const given = flags.apiUrl ?? process.env.HANDSET_API_URL;
  const apiUrl = (given ?? dev?.apiUrl)?.replace(/\/+$/, '');
  const apiKey = flags.apiKey ?? process.env.HANDSET_API_KEY ?? dev?.apiKey;
  if (!apiUrl) {
    throw new Error(`no handset dev running (none in ${stateDir}: ${START_DEV}, or pass --api-url and --api-key)`);
  }
  const noDev = `no handset dev running at ${apiUrl} (${START_DEV})`;
  if (!given && dev && !found.running) throw new Error(noDev);
  if (!apiKey) throw new Error(`no API key for ${apiUrl}: pass --api-key (or set HANDSET_API_KEY)`);
  try {
    await fetch(`${apiUrl}/healthz`, { signal: AbortSignal.timeout(5_000) });
  } catch (err) {
    if (!given) throw new Error(noDev, { cause: err });
    throw new Error(`no Handset API answers at ${apiUrl} (${networkReason(err)})`, { cause: err });
  }
  return { apiUrl, apiKey, dev, stateDir: found.stateDir, via: given ? null : talkingTo(found) };
}
