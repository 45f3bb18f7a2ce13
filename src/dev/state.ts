// What a running `handset dev` tells the other local tools (listen, trigger,
// audit): where the API, the simulator and the database are, and the demo
// credentials. Lives in <state dir>/dev.json, readable only by its owner.

import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { CarrierEnv } from '../sim/simulator.js';

export interface DevState {
  apiUrl: string;
  ingestUrl: string;
  simUrl: string;
  simControlUrl: string;
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

/** The API to talk to: flags and environment win, else the running dev platform. */
export async function resolveApi(
  stateDir: string,
  flags: { apiUrl?: string | undefined; apiKey?: string | undefined },
) {
  const dev = await readDevState(stateDir);
  const apiUrl = flags.apiUrl ?? process.env.HANDSET_API_URL ?? dev?.apiUrl;
  const apiKey = flags.apiKey ?? process.env.HANDSET_API_KEY ?? dev?.apiKey;
  if (!apiUrl || !apiKey) {
    throw new Error('no API to talk to: run `npm start` (handset dev) first, or pass --api-url and --api-key');
  }
  return { apiUrl: apiUrl.replace(/\/+$/, ''), apiKey, dev };
}
