// Runs the built `handset` command as a real OS process, for tests that kill,
// race or restart processes. `npm test` builds dist/ first (pretest). Every such
// process runs with --unhandled-rejections=strict: a promise rejection nobody
// handles kills it, so a test that counts process exits sees the bug.

import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { TEST_SECRET_KEY } from './platform.js';

export const HANDSET_BIN = fileURLToPath(new URL('../../dist/cli/handset.js', import.meta.url));

export interface HandsetProcess {
  child: ChildProcess;
  /** Its stdout and stderr, interleaved as they came. */
  output(): string;
  /** Its stdout alone (a --json document, without the lines that say which dev it talks to). */
  stdout(): string;
  /** Resolves when a line of output matches, rejects if the process exits first. */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<RegExpMatchArray>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/**
 * `cwd`: the directory it runs in, the checkout whose .handset/ a command looks in
 * when HANDSET_STATE_DIR is unset. By default its HANDSET_STATE_DIR when that
 * exists, so that nothing it writes (a dev with its state elsewhere leaves a note
 * in the checkout's .handset/) lands in this checkout.
 */
export function spawnHandset(
  args: string[],
  env: Record<string, string | undefined>,
  opts: { cwd?: string } = {},
): HandsetProcess {
  const stateDir = env['HANDSET_STATE_DIR'];
  const cwd = opts.cwd ?? (stateDir && existsSync(stateDir) ? stateDir : undefined);
  const child = spawn(process.execPath, ['--unhandled-rejections=strict', HANDSET_BIN, ...args], {
    ...(cwd ? { cwd } : {}),
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      LOG_LEVEL: 'info',
      HANDSET_SECRET_KEY: TEST_SECRET_KEY,
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let stdout = '';
  const listeners = new Set<() => void>();
  const onData = (chunk: Buffer) => {
    out += chunk.toString('utf8');
    for (const l of listeners) l();
  };
  child.stdout!.on('data', (chunk: Buffer) => {
    stdout += chunk.toString('utf8');
    onData(chunk);
  });
  child.stderr!.on('data', onData);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  return {
    child,
    output: () => out,
    stdout: () => stdout,
    exited,
    waitFor(pattern, timeoutMs = 30_000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const m = out.match(pattern);
          if (m) {
            cleanup();
            resolve(m);
          }
        };
        const timer = setTimeout(() => {
          cleanup();
          reject(new Error(`timed out waiting for ${pattern}; output:\n${out.slice(-2000)}`));
        }, timeoutMs);
        const onExit = () => {
          setImmediate(() => {
            check();
            cleanup();
            reject(new Error(`process exited before ${pattern}; output:\n${out.slice(-2000)}`));
          });
        };
        const cleanup = () => {
          clearTimeout(timer);
          listeners.delete(check);
          child.off('exit', onExit);
        };
        listeners.add(check);
        child.on('exit', onExit);
        check();
      });
    },
  };
}

export function runHandset(args: string[], env: Record<string, string | undefined>, opts: { cwd?: string } = {}) {
  const p = spawnHandset(args, env, opts);
  return p.exited.then((r) => ({ ...r, output: p.output(), stdout: p.stdout() }));
}

export interface Served {
  proc: HandsetProcess;
  apiUrl: string | null;
  ingestUrl: string | null;
  /** Still running (neither exited nor killed by a signal). */
  alive(): boolean;
}

/** `handset serve --roles …` as a real process on ports the OS picks; resolves once each role says it is up. */
export async function serveRoles(roles: string, env: Record<string, string | undefined>): Promise<Served> {
  const proc = spawnHandset(['serve', '--roles', roles], {
    HANDSET_HOST: '127.0.0.1',
    HANDSET_API_PORT: '0',
    HANDSET_INGEST_PORT: '0',
    ...env,
  });
  const apiUrl = roles.includes('api')
    ? (await proc.waitFor(/"url":"(http:[^"]+)"[^\n]*"msg":"api listening"/, 60_000))[1]!
    : null;
  const ingestUrl = roles.includes('ingest')
    ? (await proc.waitFor(/"url":"(http:[^"]+)"[^\n]*"msg":"ingest listening"/, 60_000))[1]!
    : null;
  if (roles.includes('worker')) await proc.waitFor(/worker running/, 60_000);
  return { proc, apiUrl, ingestUrl, alive: () => proc.child.exitCode === null && proc.child.signalCode === null };
}
