// Input the API used to accept too loosely, each now a 422 that names its field
// and says why in words, with nothing stored and nothing sent: impossible phone
// numbers, media URLs a carrier must not be handed, values of the wrong type that
// the validator used to convert, and text that is not Unicode. What is right
// still works: fictional 555 numbers, a query string's integers.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Platform } from '../../src/platform.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { createAccount, request, type ApiClient } from '../support/api.js';
import { count, createTestDatabase, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';

const OURS = '+13125550601';
const THEIRS = '+15555550100';

let db: TestDatabase;
let sim: Simulator;
let platform: Platform;
let base: string;
let acme: ApiClient;

beforeAll(async () => {
  db = await createTestDatabase();
  // The carrier is asked whether the number is its account's when it is added.
  sim = await startSimulator({ webhookUrl: null, seed: 'strict-input' });
  platform = await startTestPlatform({ databaseUrl: db.url, roles: ['api'], env: sim.carrierEnv() });
  base = platform.apiUrl!;
  acme = await createAccount(db.pool, base, 'Acme');
  expect((await acme.post('/v1/phone_numbers', { number: OURS })).status).toBe(201);
});
afterAll(async () => {
  await platform.stop();
  await sim.close();
  await db.drop();
});

const stored = async () =>
  (await count(db.pool, 'SELECT * FROM messages')) +
  (await count(db.pool, 'SELECT * FROM calls')) +
  (await count(db.pool, 'SELECT * FROM graphile_worker.jobs'));

const message = (over: Record<string, unknown>) => ({ from: OURS, to: THEIRS, body: 'hi', ...over });

const REFUSED: [string, string, unknown, string, RegExp][] = [
  [
    'a country code that does not exist',
    '/v1/messages',
    message({ to: '+999' }),
    'to',
    /no country has that calling code/,
  ],
  ['a number too short for its country', '/v1/messages', message({ to: '+1415999' }), 'to', /too short/],
  ['a number too long for its country', '/v1/messages', message({ to: '+123456789012345' }), 'to', /too long/],
  ['a number not in E.164 form', '/v1/messages', message({ to: '(312) 555-0100' }), 'to', /E\.164 form/],
  ['a list where one number goes', '/v1/messages', message({ to: [THEIRS] }), 'to', /must be string/],
  ['a body that is a number', '/v1/messages', message({ body: 12345 }), 'body', /must be string/],
  ['a body that is a boolean', '/v1/messages', message({ body: true }), 'body', /must be string/],
  [
    'a body with a lone surrogate',
    '/v1/messages',
    '{"from":"+13125550601","to":"+15555550100","body":"a\\ud800b"}',
    'body',
    /lone UTF-16 surrogate/,
  ],
  [
    'a loopback media URL',
    '/v1/messages',
    message({ media_urls: ['https://127.0.0.1/cat.png'] }),
    'media_urls.0',
    /not a public address/,
  ],
  [
    'a metadata-service media URL',
    '/v1/messages',
    message({ media_urls: ['https://169.254.169.254/latest/meta-data'] }),
    'media_urls.0',
    /not a public address/,
  ],
  [
    'an IPv6 loopback media URL',
    '/v1/messages',
    message({ media_urls: ['https://[::1]/a.png'] }),
    'media_urls.0',
    /not a public address/,
  ],
  ['a media URL of spaces', '/v1/messages', message({ media_urls: ['https://   '] }), 'media_urls.0', /whitespace/],
  [
    'a media URL with a newline',
    '/v1/messages',
    message({ media_urls: ['https://example.com/a\n.png'] }),
    'media_urls.0',
    /whitespace or a control character/,
  ],
  [
    'a media URL naming localhost',
    '/v1/messages',
    message({ media_urls: ['https://localhost/a.png'] }),
    'media_urls.0',
    /not a public host name/,
  ],
  [
    'a media URL with credentials',
    '/v1/messages',
    message({ media_urls: ['https://u:p@example.com/a.png'] }),
    'media_urls.0',
    /user name or password/,
  ],
  [
    'a ring timeout as a string',
    '/v1/calls',
    { from: OURS, to: [THEIRS], ring_timeout_secs: '30' },
    'ring_timeout_secs',
    /must be integer/,
  ],
  [
    'a call target that is not possible',
    '/v1/calls',
    { from: OURS, to: [THEIRS, '+999'] },
    'to.1',
    /no country has that calling code/,
  ],
];

describe('refused input', () => {
  it.each(REFUSED)('%s: 422 naming the field, and nothing stored', async (_, path, body, param, why) => {
    const before = await stored();
    const res = await request(base, 'POST', path, acme.key, body);
    expect(res.status, JSON.stringify(res.json)).toBe(422);
    expect(res.json.param).toBe(param);
    expect(res.json.detail).toMatch(why);
    expect(res.json.detail).not.toMatch(/\^\\\+|pattern/);
    expect(await stored()).toBe(before);
  });

  it('a query-string integer spelled otherwise, or given twice, is 422 naming it', async () => {
    for (const q of ['limit=1e1', 'limit=+5', 'limit=05', 'limit=%205', 'limit=5&limit=6', 'limit=five']) {
      const res = await acme.get(`/v1/messages?${q}`);
      expect(res.status, q).toBe(422);
      expect(res.json.param, q).toBe('limit');
    }
  });
});

describe('accepted input', () => {
  it('fictional 555 numbers and real ones of other countries are possible numbers', async () => {
    for (const to of ['+15555550100', '+442071838750', '+4915112345678', '+81312345678']) {
      const res = await acme.post('/v1/messages', message({ to }));
      expect(res.status, `${to}: ${JSON.stringify(res.json)}`).toBe(201);
    }
  });

  it('a query-string integer is parsed: limit=2 is a page of two', async () => {
    const res = await acme.get('/v1/messages?limit=2');
    expect(res.status).toBe(200);
    expect(res.json.data).toHaveLength(2);
    expect(res.json.has_more).toBe(true);
  });

  it('a public media URL, and text with emoji (surrogate pairs), are accepted', async () => {
    const res = await acme.post(
      '/v1/messages',
      message({ body: 'hi 😀', media_urls: ['https://example.com/cat.png'] }),
    );
    expect(res.status).toBe(201);
    expect(res.json.body).toBe('hi 😀');
  });
});
