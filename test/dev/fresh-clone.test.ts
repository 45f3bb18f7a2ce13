// A newcomer's first five minutes, as the README tells them: a fresh clone under
// a directory only its owner can enter (what `mktemp -d` and many home
// directories give), `npm install && npm start`, then, from another shell of the
// same user and checkout with no variables set, the commands the banner points to.
// As root (PostgreSQL then runs as the `postgres` user, which cannot enter the
// clone) and as a normal user. The clone is of this checkout's HEAD, installed
// from the npm cache that CI's own `npm ci` has just filled (--prefer-offline);
// the time each step took is printed, for the record.

import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { chmod, chown, cp, mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir, userInfo } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const repo = fileURLToPath(new URL('../..', import.meta.url));
const isRoot = userInfo().uid === 0;

/** Another user to run as (root runs the normal-user case as `nobody`), or null: this process's own. */
type User = { name: string; uid: number; gid: number } | null;

const cleanups: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
});

interface Proc {
  child: ChildProcess;
  stdout(): string;
  output(): string;
  waitFor(pattern: RegExp, timeoutMs: number): Promise<RegExpMatchArray>;
  /** The exit code of the command itself (npm, npx, runuser). */
  exited: Promise<number | null>;
  /** Every process that shares its output is gone (npm may exit before the node process it started). */
  closed: Promise<void>;
}

/** A command as `user`, in a process group of its own (as a shell runs a job), its output kept. */
function start(user: User, command: string, args: string[], cwd: string, env: Record<string, string>): Proc {
  const [file, argv] = user ? ['runuser', ['-u', user.name, '-m', '--', command, ...args]] : [command, args];
  const child = spawn(file, argv, { cwd, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  cleanups.push(async () => {
    try {
      process.kill(-child.pid!, 'SIGKILL'); // the group: npm may be gone and what it started not
    } catch {
      // already gone
    }
  });
  let out = '';
  let stdout = '';
  child.stdout!.on('data', (c: Buffer) => {
    out += c.toString();
    stdout += c.toString();
  });
  child.stderr!.on('data', (c: Buffer) => (out += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const closed = Promise.all([
    new Promise((resolve) => child.stdout!.on('close', resolve)),
    new Promise((resolve) => child.stderr!.on('close', resolve)),
  ]).then(() => undefined);
  return {
    child,
    stdout: () => stdout,
    output: () => out,
    exited,
    closed,
    waitFor: (pattern, timeoutMs) =>
      new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no ${pattern} in ${timeoutMs} ms:\n${out}`)), timeoutMs);
        const check = () => {
          const m = out.match(pattern);
          if (!m) return;
          clearTimeout(timer);
          resolve(m);
        };
        child.stdout!.on('data', check);
        child.stderr!.on('data', check);
        void closed.then(() => reject(new Error(`exited before ${pattern}:\n${out}`)));
        check();
      }),
  };
}

async function finish(p: Proc) {
  const code = await p.exited;
  await p.closed;
  return { code, output: p.output(), stdout: p.stdout() };
}

const seconds = (since: number) => `${((performance.now() - since) / 1000).toFixed(1)} s`;

/** A clone of HEAD in a fresh mode-700 directory of the user's; returns the checkout and a HOME for them. */
async function freshClone(user: User) {
  const dir = await mkdtemp(path.join(tmpdir(), 'handset-fresh-'));
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  await chmod(dir, 0o700);
  const app = path.join(dir, 'app');
  const { stdout: head } = await run('git', ['rev-parse', 'HEAD'], { cwd: repo });
  await run('git', ['clone', '--quiet', '--no-checkout', repo, app]);
  await run('git', ['checkout', '--quiet', '--detach', head.trim()], { cwd: app });
  let home = process.env.HOME ?? dir;
  if (user) {
    // Their own HOME, with a copy of our warm npm cache (theirs would be empty: they have never run npm).
    home = path.join(dir, 'home');
    const cache = process.env.npm_config_cache ?? path.join(process.env.HOME ?? '/root', '.npm');
    await mkdir(path.join(home, '.npm'), { recursive: true });
    await cp(path.join(cache, '_cacache'), path.join(home, '.npm', '_cacache'), { recursive: true }).catch(
      () => undefined,
    );
    await run('chown', ['-R', `${user.uid}:${user.gid}`, dir]);
  }
  return { dir, app, home };
}

async function firstFiveMinutes(user: User) {
  const timings: string[] = [];
  let t = performance.now();
  const { app, home } = await freshClone(user);
  timings.push(`clone ${seconds(t)}`);
  // "No variables set": what a login shell has, nothing of Handset's.
  const env = { PATH: process.env.PATH!, HOME: home };

  t = performance.now();
  const install = await finish(
    start(user, 'npm', ['install', '--prefer-offline', '--no-audit', '--no-fund'], app, env),
  );
  expect(install.code, install.output).toBe(0);
  expect(install.output).not.toContain('EBADENGINE');
  timings.push(`npm install ${seconds(t)}`);

  // Only dev's own ports are set: the usual 3000-3002 may be taken by whatever else runs beside this test.
  // Its temporary directory is one of the test's, so the binaries root copies for postgres go with it.
  const scratch = await mkdtemp(path.join(tmpdir(), 'handset-fresh-tmp-'));
  cleanups.push(() => rm(scratch, { recursive: true, force: true }));
  await chmod(scratch, 0o755);
  if (user) await chown(scratch, user.uid, user.gid);
  t = performance.now();
  const dev = start(user, 'npm', ['start'], app, {
    ...env,
    TMPDIR: scratch,
    HANDSET_API_PORT: '0',
    HANDSET_INGEST_PORT: '0',
    HANDSET_SIM_PORT: '0',
  });
  cleanups.push(async () => {
    // Where dev moved PostgreSQL's data (as root), recorded in the checkout.
    const moved = await readFile(path.join(app, '.handset', 'postgres.json'), 'utf8')
      .then((text) => (JSON.parse(text) as { dataDir?: string }).dataDir)
      .catch(() => undefined);
    if (moved) await rm(moved, { recursive: true, force: true });
  });
  const [, apiUrl] = await dev.waitFor(/API\s+(http:\/\/\S+)/, 300_000);
  expect((await fetch(`${apiUrl}/readyz`)).status).toBe(200);
  timings.push(`npm start → /readyz ${seconds(t)}`);
  if (isRoot && !user) {
    // It said, in one line, where PostgreSQL's data went instead.
    expect(dev.output()).toMatch(/^PostgreSQL runs as the "postgres" user, which cannot enter .*: its data is in \S+/m);
  }
  const talking = new RegExp(`^Using handset dev at ${apiUrl} \\(pid \\d+, state in ${app}/\\.handset\\)$`, 'm');

  t = performance.now();
  const listen = start(user, 'npx', ['handset', 'listen'], app, env);
  await listen.waitFor(/Your webhook signing secret is whsec_/, 120_000);
  expect(listen.output()).toMatch(talking);

  // Three more shells at once, as a person with several terminals might.
  const [audit, trigger, created] = await Promise.all(
    [['audit'], ['trigger', 'delivered'], ['accounts', 'create', '--name', 'x', '--json']].map((args) =>
      finish(start(user, 'npx', ['handset', ...args], app, env)),
    ),
  );
  for (const r of [audit!, trigger!, created!]) {
    expect(r.code, r.output).toBe(0);
    expect(r.output).toMatch(talking);
  }
  const [, messageId] = trigger!.output.match(/Sent (msg_\w+)/)!;
  expect(trigger!.output).toContain('It was delivered.');
  await listen.waitFor(new RegExp(`✔ .*message\\.delivered .*${messageId}`), 60_000);
  expect(JSON.parse(created!.stdout)).toEqual({
    account_id: expect.stringMatching(/^acct_/),
    api_key: expect.stringMatching(/^hsk_/),
  });

  // Still listening, then a terminal's Ctrl-C: listen stops cleanly (npx itself dies of the SIGINT, as npm does).
  expect(listen.child.exitCode).toBeNull();
  process.kill(-listen.child.pid!, 'SIGINT');
  await listen.closed;
  expect(listen.output().split('\n')).toContain('stopped'); // runuser may add "Interrupt" after it
  timings.push(`listen, audit, trigger delivered, accounts create ${seconds(t)}`);

  process.kill(-dev.child.pid!, 'SIGINT'); // a terminal's Ctrl-C
  await dev.closed;
  expect(dev.output().split('\n')).toContain('stopped');
  return timings;
}

/** The normal user root runs the second case as. */
async function nobody(): Promise<NonNullable<User>> {
  const id = async (flag: string) => Number((await run('id', [flag, 'nobody'])).stdout.trim());
  return { name: 'nobody', uid: await id('-u'), gid: await id('-g') };
}

// The two run at once: most of their time is npm writing node_modules, which leaves the processors to the other.
describe.concurrent('a fresh clone under a mode-700 directory, no variables set', () => {
  it.runIf(isRoot)(
    'as root: npm install && npm start serves /readyz, and listen, audit, trigger delivered and accounts create from another shell exit 0',
    async () => {
      const timings = await firstFiveMinutes(null);
      console.log(`fresh clone as root: ${timings.join(', ')}`);
    },
    900_000,
  );

  it('as a normal user: npm install && npm start serves /readyz, and listen, audit, trigger delivered and accounts create from another shell exit 0', async () => {
    const timings = await firstFiveMinutes(isRoot ? await nobody() : null);
    console.log(`fresh clone as a normal user: ${timings.join(', ')}`);
  }, 900_000);
});
