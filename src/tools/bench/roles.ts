// Handset roles as the bench runs them: real OS processes of the built CLI,
// `handset serve --roles ingest|api|worker`, configured only through the
// environment, exactly as an operator would start them. Optionally under
// `node --cpu-prof`, which writes a .cpuprofile when the process exits. And
// baseline H, ingest's server with nothing stored (http-floor.ts), and the
// carrier (`handset sim`), the same way: a process of its own, as the carrier's
// side of the wire would be, its CPU apart from the load generator's.

import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const HANDSET_BIN = fileURLToPath(new URL('../../cli/handset.js', import.meta.url));
const FLOOR_BIN = fileURLToPath(new URL('./http-floor.js', import.meta.url));

export interface RoleEnv {
  databaseUrl: string;
  telnyxPublicKey: string;
  /** HANDSET_SECRET_KEY: the bench seals its endpoints' secrets with it too. */
  secretKey: string;
  /** Extra variables (HANDSET_WORKER_CONCURRENCY…). */
  extra?: Record<string, string>;
}

export type BenchRole = 'ingest' | 'api' | 'worker';

export interface RoleProcess {
  role: BenchRole | 'floor' | 'sim';
  pid: number;
  /**
   * The base URL (http://127.0.0.1:port) of ingest, the API or the floor; the
   * simulator's control API (…/_sim); null for a worker.
   */
  url: string | null;
  output(): string;
  stop(): Promise<void>;
}

export interface SpawnOptions {
  /** Directory for a --cpu-prof profile; none when absent. */
  profileDir?: string | undefined;
  /** More flags for node itself (`--import` of a preload…). */
  nodeArgs?: string[];
}

/** A role's JSON log line that says it is ready; ingest, the API and the floor say where they listen. */
const readyLine = (role: BenchRole | 'floor'): Ready => ({
  pattern: new RegExp(`^.*"msg":"${role === 'worker' ? 'worker running' : `${role} listening`}".*\n`, 'm'),
  url: (m) => (role === 'worker' ? null : (JSON.parse(m[0]) as { url: string }).url),
});

export async function spawnRole(role: BenchRole, env: RoleEnv, opts: SpawnOptions = {}): Promise<RoleProcess> {
  return start(role, [HANDSET_BIN, 'serve', '--roles', role], readyLine(role), opts, {
    DATABASE_URL: env.databaseUrl,
    HANDSET_HOST: '127.0.0.1',
    HANDSET_INGEST_PORT: '0',
    HANDSET_API_PORT: '0',
    TELNYX_PUBLIC_KEY: env.telnyxPublicKey,
    HANDSET_SECRET_KEY: env.secretKey,
    // The worker needs a carrier API; the bench sends only in its bulk phase (which sets its own).
    TELNYX_API_KEY: 'KEY_bench',
    TELNYX_API_URL: 'http://127.0.0.1:9/v2',
    HANDSET_ALLOW_PRIVATE_WEBHOOK_URLS: 'true',
    LOG_LEVEL: 'info',
    ...env.extra,
  });
}

/** Baseline H (http-floor.ts): ingest's server with nothing written, as its own process. */
export async function spawnFloor(
  env: Pick<RoleEnv, 'databaseUrl' | 'telnyxPublicKey'>,
  opts: SpawnOptions = {},
): Promise<RoleProcess> {
  return start('floor', [FLOOR_BIN], readyLine('floor'), opts, {
    DATABASE_URL: env.databaseUrl,
    TELNYX_PUBLIC_KEY: env.telnyxPublicKey,
  });
}

export interface SimulatorProcess extends RoleProcess {
  /** TELNYX_API_URL, TELNYX_API_KEY and TELNYX_PUBLIC_KEY, as `handset sim` printed them. */
  carrierEnv: Record<string, string>;
}

/** `handset sim` with the given flags, on a free port; `url` is its control API (…/_sim). */
export async function spawnSimulator(flags: string[], opts: SpawnOptions = {}): Promise<SimulatorProcess> {
  const p = await start(
    'sim',
    [HANDSET_BIN, 'sim', '--port', '0', ...flags],
    // Its banner, up to the last line it prints before it runs.
    { pattern: /^ {2}control {3}→ (\S+)\/state\n[\s\S]*?^ {2}behaviour → .*\n/m, url: (m) => m[1]! },
    opts,
    { LOG_LEVEL: 'warn' },
  );
  const carrierEnv = Object.fromEntries(
    [...p.output().matchAll(/^ {2}(TELNYX_[A-Z_]+)=(\S+)$/gm)].map((m) => [m[1]!, m[2]!] as const),
  );
  for (const name of ['TELNYX_API_URL', 'TELNYX_API_KEY', 'TELNYX_PUBLIC_KEY'])
    if (!carrierEnv[name]) {
      await p.stop();
      throw new Error(`handset sim did not print ${name}:\n${p.output()}`);
    }
  return { ...p, carrierEnv };
}

interface Ready {
  /** Matched against everything the process wrote so far. */
  pattern: RegExp;
  /** Its base URL from the match; null when it serves nothing. */
  url: (m: RegExpMatchArray) => string | null;
}

async function start(
  role: RoleProcess['role'],
  args: string[],
  ready: Ready,
  opts: SpawnOptions,
  env: Record<string, string | undefined>,
): Promise<RoleProcess> {
  const nodeArgs = [
    '--unhandled-rejections=strict',
    ...(opts.profileDir ? ['--cpu-prof', '--cpu-prof-dir', opts.profileDir] : []),
    ...(opts.nodeArgs ?? []),
  ];
  const child = spawn(process.execPath, [...nodeArgs, ...args], {
    env: { PATH: process.env['PATH'], HOME: process.env['HOME'], ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  const onData = (chunk: Buffer) => {
    out = (out + chunk.toString('utf8')).slice(-20_000);
  };
  child.stdout!.on('data', onData);
  child.stderr!.on('data', onData);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));

  const url = ready.url(await waitForOutput(role, child, () => out, ready.pattern, 30_000));
  return {
    role,
    pid: child.pid!,
    url,
    output: () => out,
    async stop() {
      if (child.exitCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

function waitForOutput(
  role: string,
  child: ChildProcess,
  out: () => string,
  pattern: RegExp,
  timeoutMs: number,
): Promise<RegExpMatchArray> {
  return new Promise((resolve, reject) => {
    const check = () => {
      const m = out().match(pattern);
      if (m) {
        cleanup();
        resolve(m);
      }
    };
    const onExit = () => {
      cleanup();
      reject(new Error(`${role} exited before it was ready:\n${out().slice(-2000)}`));
    };
    const timer = setTimeout(() => {
      cleanup();
      child.kill('SIGKILL');
      reject(new Error(`${role} not ready within ${timeoutMs} ms:\n${out().slice(-2000)}`));
    }, timeoutMs);
    const cleanup = () => {
      clearTimeout(timer);
      child.stdout!.off('data', check);
      child.stderr!.off('data', check);
      child.off('exit', onExit);
    };
    child.stdout!.on('data', check);
    child.stderr!.on('data', check);
    child.on('exit', onExit);
    check();
  });
}
