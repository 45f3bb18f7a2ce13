// Dev mode as a newcomer meets it: a fresh state directory, `handset dev`, the
// printed key, an SMS, and `handset listen` receiving a verified
// message.delivered. Real processes, the simulator as the carrier. Each dev runs
// in a checkout of its own (a directory standing in for one), with its state
// elsewhere (HANDSET_STATE_DIR), as a developer who set it would.

import { type ChildProcess, spawn } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signPayload } from '../../src/delivery/signature.js';
import { verificationFailure } from '@handset/client';
import type { DevState } from '../../src/dev/state.js';
import { HANDSET_BIN, runHandset, spawnHandset, type HandsetProcess } from '../support/process.js';

const procs: HandsetProcess[] = [];
const dirs: string[] = [];
afterAll(async () => {
  for (const p of procs) p.child.kill('SIGKILL');
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

async function stateDir() {
  const d = await mkdtemp(path.join(tmpdir(), 'handset-dev-'));
  dirs.push(d);
  await mkdir(checkoutOf(d));
  return d;
}

/** The checkout a state directory's dev runs in: its .handset/ is not the state directory. */
const checkoutOf = (dir: string) => path.join(dir, 'checkout');
const here = (dir: string) => ({ cwd: checkoutOf(dir) });

const env = (dir: string) => ({
  HANDSET_STATE_DIR: dir,
  HANDSET_API_PORT: '0',
  HANDSET_INGEST_PORT: '0',
  HANDSET_SIM_PORT: '0',
});

function start(args: string[], dir: string) {
  const p = spawnHandset(args, env(dir), here(dir));
  procs.push(p);
  return p;
}

describe('handset dev', () => {
  it('from a fresh state directory: start, send an SMS with the printed key, and a listening client receives a verified message.delivered', async () => {
    const dir = await stateDir();
    const dev = start(['dev'], dir);
    const [, key] = await dev.waitFor(/API key\s+(hsk_\S+)/, 90_000);
    const [, apiUrl] = await dev.waitFor(/API\s+(http:\/\/\S+)/);
    expect(dev.output()).toContain('npx handset listen');
    const state = JSON.parse(await readFile(path.join(dir, 'dev.json'), 'utf8')) as DevState;
    expect(state.apiKey).toBe(key);

    const listen = start(['listen'], dir);
    await listen.waitFor(/Your webhook signing secret is whsec_/);

    const res = await fetch(`${apiUrl}/v1/messages`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ from: state.number, to: '+15555550100', body: 'Hello from the smoke test' }),
    });
    expect(res.status).toBe(201);
    const { id } = (await res.json()) as { id: string };
    await listen.waitFor(new RegExp(`✔ .*message\\.delivered .*${id}`), 30_000);
    expect(listen.output()).toMatch(new RegExp(`✔ .*message\\.sent .*${id}`));
    expect(listen.output()).not.toContain('✘');

    // trigger drives the same pipeline
    const trigger = spawnHandset(['trigger', 'failed'], env(dir), here(dir));
    expect((await trigger.exited).code).toBe(0);
    expect(trigger.output()).toContain('It was not delivered: the carrier answered error 40008.');

    // Telnyx refusing connections: a message with the demo Twilio number as fallback goes out once, through Twilio
    const failover = spawnHandset(['trigger', 'failover'], env(dir), here(dir));
    expect((await failover.exited).code, failover.output()).toBe(0);
    expect(failover.output()).toMatch(/sent through twilio from \+13125550143 \(failed over from telnyx: /);
    expect(failover.output()).toMatch(/Accepted by Telnyx 0 time\(s\), by Twilio 1 time\(s\)/);

    // a hangup the carrier loses for good is learned from its record, and the late webhook changes nothing
    const lost = spawnHandset(['trigger', 'lost-hangup'], env(dir), here(dir));
    expect((await lost.exited).code, lost.output()).toBe(0);
    expect(lost.output()).toMatch(
      /leg 0: \+1555555\d{4}\s+completed \(unspecified\) — hangup learned from the carrier's record/,
    );
    expect(lost.output()).toMatch(/Call completed after 3 s/);
    expect(lost.output()).toMatch(/Handset changed nothing: events call\.answered, call\.completed\./);
    const dry = spawnHandset(['reconcile', '--dry-run'], env(dir), here(dir));
    expect((await dry.exited).code).toBe(0);
    expect(dry.output()).toContain('nothing is waiting past its bound');

    listen.child.kill('SIGINT');
    expect((await listen.exited).code).toBe(0);
    dev.child.kill('SIGTERM');
    expect((await dev.exited).code).toBe(0);
    expect(dev.output().trimEnd().split('\n').at(-1)).toBe('stopped');

    // a restart keeps the demo account and key; --reset starts clean
    const again = start(['dev'], dir);
    await again.waitFor(new RegExp(`API key\\s+${key}`), 90_000);
    again.child.kill('SIGTERM');
    expect((await again.exited).code).toBe(0);
    const reset = start(['dev', '--reset'], dir);
    const [, fresh] = await reset.waitFor(/API key\s+(hsk_\S+)/, 90_000);
    expect(fresh).not.toBe(key);
    reset.child.kill('SIGTERM');
    expect((await reset.exited).code).toBe(0);
  }, 300_000); // three starts of dev, each allowed 90 s, on a busy machine
});

describe('handset dev shutdown', () => {
  it('a SIGTERM that arrives while dev is still starting waits for start-up, then stops cleanly: exit 0 and no PostgreSQL left behind', async () => {
    const dir = await stateDir();
    const dev = start(['dev'], dir);
    await dev.waitFor(/Starting Handset/);
    dev.child.kill('SIGTERM');
    expect(await dev.exited).toEqual({ code: 0, signal: null });
    expect(dev.output().trimEnd().split('\n').at(-1)).toBe('stopped');
    // pg.stop() removes the pid file only after PostgreSQL has stopped
    await expect(readFile(path.join(dir, 'handset.pid'), 'utf8')).rejects.toThrow(/ENOENT/);
  });
});

describe('handset dev in a terminal', () => {
  let dir: string;
  let dev: ChildProcess;
  let out = '';
  let exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;

  beforeAll(async () => {
    dir = await stateDir();
    // A process group of its own, as a shell gives a foreground job: a terminal's Ctrl-C reaches the whole group.
    dev = spawn(process.execPath, ['--unhandled-rejections=strict', HANDSET_BIN, 'dev'], {
      cwd: checkoutOf(dir),
      env: { PATH: process.env.PATH, HOME: process.env.HOME, LOG_LEVEL: 'info', ...env(dir) },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    exited = new Promise((resolve) => dev.on('exit', (code, signal) => resolve({ code, signal })));
    dev.stdout!.on('data', (c: Buffer) => (out += c.toString()));
    dev.stderr!.on('data', (c: Buffer) => (out += c.toString()));
    const deadline = Date.now() + 90_000;
    while (!/API key\s+hsk_/.test(out)) {
      if (Date.now() > deadline || dev.exitCode !== null) throw new Error(`dev did not start:\n${out}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  });
  afterAll(() => {
    if (dev.exitCode === null) process.kill(-dev.pid!, 'SIGKILL');
  });

  it('listen --print-json prints each event as received; a forward answered 404 is ✘ with its status, and the redelivery that follows is marked ↻', async () => {
    const target = http.createServer((_req, res) => res.writeHead(404).end());
    await new Promise<void>((resolve) => target.listen(0, '127.0.0.1', resolve));
    const forwardTo = `http://127.0.0.1:${(target.address() as AddressInfo).port}/hooks`;
    try {
      const listen = start(['listen', '--print-json', '--forward-to', forwardTo], dir);
      let stdout = '';
      listen.child.stdout!.on('data', (c: Buffer) => (stdout += c.toString()));
      await listen.waitFor(/Your webhook signing secret is whsec_/);

      const trigger = spawnHandset(['trigger', 'delivered', '--json', '--body', 'forward me'], env(dir), here(dir));
      expect((await trigger.exited).code, trigger.output()).toBe(0);
      const summary = JSON.parse(trigger.stdout());
      expect(summary).toMatchObject({
        scenario: 'delivered',
        message: { status: 'delivered', to: '+15555550100' },
        events: ['message.sent', 'message.delivered'],
      });
      const id = summary.message.id as string;

      const failed = new RegExp(`✘ .*message\\.sent .*${id}.*→ ${forwardTo} \\[404\\]`);
      await listen.waitFor(failed);
      // listen answered 502 for the failed forward, so Handset delivers the same webhook-id again (in ~5 s).
      const again = await listen.waitFor(new RegExp(`✘ .*message\\.sent .*${id}.*↻ redelivery.*\\[404\\]`), 30_000);
      expect(again[0]).not.toContain('✔');
      listen.child.kill('SIGINT');
      expect((await listen.exited).code).toBe(0);

      // stdout carries the events alone, each one as it was received.
      const events = stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l));
      expect(events.filter((e) => e.type === 'message.sent' && e.data.id === id).length).toBeGreaterThanOrEqual(2);
      expect(stdout).not.toContain('✘');
      expect(listen.output()).toContain('stopped');
    } finally {
      target.close();
    }
  });

  it('accounts create writes to the running dev’s database (no DATABASE_URL), and the key it prints works', async () => {
    const made = await runHandset(['accounts', 'create', '--name', 'Acme', '--json'], env(dir), here(dir));
    expect(made.code, made.output).toBe(0);
    const { account_id, api_key } = JSON.parse(made.stdout);
    expect(account_id).toMatch(/^acct_/);
    const state = JSON.parse(await readFile(path.join(dir, 'dev.json'), 'utf8')) as DevState;
    const res = await fetch(`${state.apiUrl}/v1/messages`, { headers: { authorization: `Bearer ${api_key}` } });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ data: [], has_more: false }); // an account of its own

    const text = await runHandset(['accounts', 'create', '--name', 'Beta'], env(dir), here(dir));
    expect(text.code).toBe(0);
    expect(text.output).toMatch(/^Created account acct_\w+ \(Beta\)\.\nAPI key: hsk_\S+\nIt is shown only this once/m);
  });

  it('from its checkout with no variables set, every command finds the dev started with HANDSET_STATE_DIR elsewhere and says which', async () => {
    const state = JSON.parse(await readFile(path.join(dir, 'dev.json'), 'utf8')) as DevState;
    const which = `Using handset dev at ${state.apiUrl} (pid ${state.pid}, state in ${dir})`;
    const bare = { HANDSET_SECRET_KEY: undefined };
    const listen = spawnHandset(['listen'], bare, here(dir));
    procs.push(listen);
    await listen.waitFor(/Your webhook signing secret is whsec_/);

    const made = await runHandset(['accounts', 'create', '--name', 'Bare', '--json'], bare, here(dir));
    expect(made.code, made.output).toBe(0);
    const { account_id } = JSON.parse(made.stdout) as { account_id: string };
    for (const args of [
      ['audit'],
      ['reconcile', '--dry-run'],
      ['trigger', 'delivered'],
      ['accounts', 'keys', 'list', '--account', account_id],
    ]) {
      const r = await runHandset(args, bare, here(dir));
      expect(r.code, `${args.join(' ')}: ${r.output}`).toBe(0);
      expect(r.output.split('\n'), args.join(' ')).toContain(which);
    }
    expect(made.output.split('\n')).toContain(which);
    listen.child.kill('SIGINT');
    expect((await listen.exited).code).toBe(0);
    expect(listen.output().split('\n')).toContain(which);
    // listen kept its endpoint and secret with the dev's state, not in the checkout
    await expect(readFile(path.join(dir, 'listen.json'), 'utf8')).resolves.toContain(state.apiUrl);
  });

  it('two devs of two checkouts: the commands of each checkout find their own', async () => {
    const other = await stateDir();
    const second = start(['dev'], other);
    await second.waitFor(/API key\s+hsk_/, 90_000);
    const mine = JSON.parse(await readFile(path.join(dir, 'dev.json'), 'utf8')) as DevState;
    const theirs = JSON.parse(await readFile(path.join(other, 'dev.json'), 'utf8')) as DevState;
    expect(theirs.apiUrl).not.toBe(mine.apiUrl);

    for (const [state, itsDir, otherApi] of [
      [mine, dir, theirs.apiUrl],
      [theirs, other, mine.apiUrl],
    ] as const) {
      const made = await runHandset(['accounts', 'create', '--name', 'Own', '--json'], {}, here(itsDir));
      expect(made.code, made.output).toBe(0);
      expect(made.output).toContain(`Using handset dev at ${state.apiUrl} (pid ${state.pid}, state in ${itsDir})`);
      const { api_key } = JSON.parse(made.stdout) as { api_key: string };
      const own = await fetch(`${state.apiUrl}/v1/messages`, { headers: { authorization: `Bearer ${api_key}` } });
      expect(own.status).toBe(200);
      const elsewhere = await fetch(`${otherApi}/v1/messages`, { headers: { authorization: `Bearer ${api_key}` } });
      expect(elsewhere.status).toBe(401);
    }
    second.child.kill('SIGTERM');
    expect((await second.exited).code).toBe(0);
  });

  it('Ctrl-C (SIGINT to its whole process group) stops it quietly: "stopped", exit 0, no log lines, no PostgreSQL left', async () => {
    const before = out.length;
    process.kill(-dev.pid!, 'SIGINT');
    expect(await exited).toEqual({ code: 0, signal: null });
    const after = out.slice(before);
    expect(after).toBe('stopped\n');
    expect(out).not.toMatch(/^\{/m);
    await expect(readFile(path.join(dir, 'handset.pid'), 'utf8')).rejects.toThrow(/ENOENT/);
    await expect(readFile(path.join(dir, 'postgres', 'postmaster.pid'), 'utf8')).rejects.toThrow(/ENOENT/);
  });
});

describe('handset listen verification', () => {
  const secret = 'whsec_' + Buffer.alloc(32, 7).toString('base64');
  const now = 1_800_000_000;
  const body = '{"id":"evt_1","type":"message.sent","data":{}}';
  const headers = (over: Record<string, string> = {}) => ({
    'webhook-id': 'evt_1',
    'webhook-timestamp': String(now),
    'webhook-signature': signPayload(secret, 'evt_1', now, body),
    ...over,
  });

  it('accepts a valid signature, also among several', () => {
    expect(verificationFailure(secret, headers(), body, now)).toBeNull();
    expect(
      verificationFailure(
        secret,
        headers({ 'webhook-signature': `v1,AAAA ${signPayload(secret, 'evt_1', now, body)}` }),
        body,
        now,
      ),
    ).toBeNull();
  });

  it('refuses a tampered body, another secret, a stale or future timestamp and missing headers', () => {
    expect(verificationFailure(secret, headers(), body.replace('sent', 'failed'), now)).toBe('no matching signature');
    expect(verificationFailure('whsec_' + Buffer.alloc(32, 8).toString('base64'), headers(), body, now)).toBe(
      'no matching signature',
    );
    expect(verificationFailure(secret, headers(), body, now + 301)).toBe('timestamp out of tolerance');
    expect(verificationFailure(secret, headers(), body, now - 301)).toBe('timestamp out of tolerance');
    expect(verificationFailure(secret, { 'webhook-id': 'evt_1' }, body, now)).toBe('missing webhook headers');
  });
});
