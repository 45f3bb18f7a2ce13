// Runs npm (or any command) for the docs and package tests the way a reader's
// shell would: a clean environment (none of the npm_* variables `npm test` hands
// down, which would point a nested npm at this checkout), this machine's npm cache,
// and no network round trip for what the cache already holds.

import { spawn } from 'node:child_process';
import { homedir } from 'node:os';
import path from 'node:path';

export interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** A reader's environment: PATH, a HOME of the test's choosing and npm's cache, offline first. */
export function readerEnv(home: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    PATH: process.env.PATH ?? '',
    HOME: home,
    npm_config_cache: process.env.npm_config_cache ?? path.join(homedir(), '.npm'),
    npm_config_prefer_offline: 'true',
    npm_config_audit: 'false',
    npm_config_fund: 'false',
    npm_config_update_notifier: 'false',
    ...extra,
  };
}

export function run(
  command: string,
  args: string[],
  opts: { cwd: string; env: Record<string, string>; timeoutMs?: number },
): Promise<Ran> {
  return new Promise((resolve) => {
    const child = spawn(command, args, { cwd: opts.cwd, env: opts.env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString('utf8')));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString('utf8')));
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 120_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** `npm pack` of a workspace package into a directory; answers the tarball's path and the files it holds. */
export async function npmPack(root: string, pkg: string, into: string, env: Record<string, string>) {
  const packed = await run('npm', ['pack', `./${pkg}`, '--pack-destination', into, '--json'], { cwd: root, env });
  if (packed.code !== 0) throw new Error(`npm pack ${pkg} failed:\n${packed.stderr}`);
  const [info] = JSON.parse(packed.stdout) as [{ filename: string; files: { path: string }[] }];
  return { tarball: path.join(into, info.filename), files: info.files.map((f) => f.path) };
}
