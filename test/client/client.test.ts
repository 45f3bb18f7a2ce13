// The typed client (@handset/client): its committed types are exactly what the
// document the running API serves generates, a program using every operation
// type-checks while the mistakes marked in it are refused, a message sent through it
// is delivered once, and constructEvent verifies what Handset sends. (The README's
// example runs in test/docs/readme.test.ts, from the packed package.)

import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { constructEvent, createClient, WebhookVerificationError } from '@handset/client';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { Platform } from '../../src/platform.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { CLIENT_TYPES, clientTypes } from '../../src/tools/client/generate.js';
import { createAccount, request, type ApiClient } from '../support/api.js';
import { createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';
import { startReceiver, type Receiver } from '../support/receiver.js';

const run = promisify(execFile);
const ROOT = path.resolve(import.meta.dirname, '../..');
const FIXTURE = path.join(import.meta.dirname, 'fixture');
const NUMBER = '+13125550142';

let db: TestDatabase;
let sim: Simulator;
let platform: Platform;
let acme: ApiClient;
let receiver: Receiver;
let served: any;

beforeAll(async () => {
  db = await createTestDatabase();
  sim = await startSimulator({ webhookUrl: null, timeScale: 0.01, seed: 'client' });
  platform = await startTestPlatform({
    databaseUrl: db.url,
    roles: ['ingest', 'api', 'worker'],
    env: sim.carrierEnv(),
  });
  sim.setWebhookUrl(`${platform.ingestUrl}/webhooks/telnyx`);
  acme = await createAccount(db.pool, platform.apiUrl!, 'Acme');
  expect((await acme.post('/v1/phone_numbers', { number: NUMBER })).status).toBe(201);
  receiver = await startReceiver();
  const ep = await acme.post('/v1/webhook_endpoints', { url: receiver.url });
  receiver.secrets = [ep.json.secret];
  served = (await request(platform.apiUrl!, 'GET', '/openapi.json', null)).json;
});
afterAll(async () => {
  await platform?.stop();
  await sim?.close();
  await receiver?.close();
  await db?.drop();
});

describe('the typed client', () => {
  it('its committed types are what the document the running API serves generates', async () => {
    expect(await clientTypes(served)).toBe(readFileSync(CLIENT_TYPES, 'utf8'));
  });

  it('`handset openapi` prints the document the API serves, without touching a database', async () => {
    const { stdout } = await run(process.execPath, [path.join(ROOT, 'dist/cli/handset.js'), 'openapi'], {
      env: { ...process.env, DATABASE_URL: 'postgres://nobody@127.0.0.1:1/nowhere' },
      maxBuffer: 16 * 1024 * 1024,
    });
    expect(JSON.parse(stdout)).toEqual(served);
  });

  it('a program using every operation type-checks, and every mistake marked in it is refused', async () => {
    const tsc = path.join(ROOT, 'node_modules/typescript/bin/tsc');
    const result = await run(process.execPath, [tsc, '-p', path.join(FIXTURE, 'tsconfig.json')], { cwd: ROOT }).then(
      () => ({ code: 0, stdout: '' }),
      (err: { code: number; stdout: string }) => err,
    );
    // An @ts-expect-error over a line that compiles is itself an error (TS2578): exit 0 means each was refused.
    expect(result.stdout).toBe('');
    expect(result.code).toBe(0);
    const marked = readFileSync(path.join(FIXTURE, 'every-operation.ts'), 'utf8').match(/@ts-expect-error/g) ?? [];
    expect(marked.length).toBeGreaterThanOrEqual(8);
  }, 60_000);

  it('the program names every operation the API serves', () => {
    const text = readFileSync(path.join(FIXTURE, 'every-operation.ts'), 'utf8');
    const tour = text.slice(
      text.indexOf('export async function everyOperation'),
      text.indexOf('export async function mistakes'),
    );
    const used = new Set([...tour.matchAll(/hs\.(GET|POST|PATCH|DELETE)\('([^']+)'/g)].map((m) => `${m[1]} ${m[2]}`));
    const operations = Object.entries(served.paths as Record<string, object>).flatMap(([p, methods]) =>
      Object.keys(methods).map((m) => `${m.toUpperCase()} ${p}`),
    );
    expect(operations.filter((op) => !used.has(op))).toEqual([]);
    expect([...used].filter((op) => !operations.includes(op))).toEqual([]);
  });

  it('a message sent through the client reads back queued, is delivered once, and its timeline says so', async () => {
    const hs = createClient({ apiKey: acme.key, baseUrl: platform.apiUrl! });
    const { data: created } = await hs.POST('/v1/messages', { body: { from: NUMBER, to: '+15555550100', body: 'Hi' } });
    const { data: first } = await hs.GET('/v1/messages/{id}/status_history', {
      params: { path: { id: created!.id } },
    });
    expect(first!.data.map((h) => `${h.status} (${h.effect})`)[0]).toBe('queued (applied)');

    const sms = (await hs.GET('/v1/messages', { params: { query: { limit: 1 } } })).data!.data[0]!;
    expect(sms.id).toBe(created!.id);
    expect(sms).toMatchObject({ from: NUMBER, to: '+15555550100', body: 'Hi' });
    const delivered = await eventually(async () => {
      const { data } = await hs.GET('/v1/messages/{id}', { params: { path: { id: sms.id } } });
      return data?.status === 'delivered' && data;
    }, 20_000);
    expect(delivered.completed_at).not.toBeNull();
    const { data: timeline } = await hs.GET('/v1/messages/{id}/status_history', { params: { path: { id: sms.id } } });
    expect(timeline!.data.filter((h) => h.effect === 'applied').map((h) => h.status)).toEqual([
      'queued',
      'sent',
      'delivered',
    ]);

    // What reached the endpoint verifies with constructEvent, and says delivered once.
    const events = await eventually(async () => {
      const got = receiver.received.map((r) => constructEvent(receiver.secrets[0]!, r.headers, r.body));
      const mine = got.filter((e) => (e.data as { id?: string }).id === sms.id);
      return mine.some((e) => e.type === 'message.delivered') && mine;
    }, 20_000);
    expect(events.filter((e) => e.type === 'message.delivered')).toHaveLength(1);
  });

  it('an answer the API refused carries its problem, typed', async () => {
    const hs = createClient({ apiKey: acme.key, baseUrl: platform.apiUrl! });
    const { data, error, response } = await hs.POST('/v1/messages', {
      body: { from: NUMBER, to: '+999', body: 'Hi' },
    });
    expect(data).toBeUndefined();
    expect(response.status).toBe(422);
    expect(error).toMatchObject({ code: 'invalid_phone_number', param: 'to' });
    const wrongKey = createClient({ apiKey: 'hs_nope', baseUrl: platform.apiUrl! });
    expect((await wrongKey.GET('/v1/messages')).error).toMatchObject({ status: 401, code: 'unauthorized' });
  });

  it('without a key it says so at once, before any request', () => {
    vi.stubEnv('HANDSET_API_KEY', '');
    try {
      expect(() => createClient({ baseUrl: platform.apiUrl! })).toThrow(/pass apiKey, or set HANDSET_API_KEY/);
    } finally {
      vi.unstubAllEnvs();
    }
  });
});

describe('constructEvent', () => {
  const secret = `whsec_${Buffer.alloc(32, 3).toString('base64')}`;
  const body = JSON.stringify({
    id: 'evt_1',
    type: 'message.delivered',
    timestamp: '2026-12-03T08:00:00.000Z',
    account_id: 'acct_1',
    data: { id: 'msg_1', status: 'delivered' },
  });
  const at = new Date('2026-12-03T08:00:00Z');
  const now = Math.floor(at.getTime() / 1000);
  // Signed by the independent Standard Webhooks library, not by our own signer.
  const headers = () => {
    const signature = new Webhook(secret).sign('evt_1', at, body);
    return { 'webhook-id': 'evt_1', 'webhook-timestamp': String(now), 'webhook-signature': signature };
  };

  it('answers the event a genuine request carries, from plain headers or a Headers object', () => {
    expect(constructEvent(secret, headers(), body, now)).toMatchObject({ id: 'evt_1', type: 'message.delivered' });
    expect(constructEvent(secret, new Headers(headers()), body, now).id).toBe('evt_1');
  });

  it('refuses a changed body, another secret, a stale timestamp and missing headers', () => {
    const refused = (f: () => unknown) => {
      try {
        f();
      } catch (err) {
        expect(err).toBeInstanceOf(WebhookVerificationError);
        return (err as Error).message;
      }
      return 'accepted';
    };
    expect(refused(() => constructEvent(secret, headers(), body.replace('delivered', 'failed'), now))).toBe(
      'no matching signature',
    );
    const other = `whsec_${Buffer.alloc(32, 4).toString('base64')}`;
    expect(refused(() => constructEvent(other, headers(), body, now))).toBe('no matching signature');
    expect(refused(() => constructEvent(secret, headers(), body, now + 301))).toBe('timestamp out of tolerance');
    expect(refused(() => constructEvent(secret, { 'webhook-id': 'evt_1' }, body, now))).toBe('missing webhook headers');
  });
});
