// Customer webhook URLs cannot reach our own network through IPv4 hidden in IPv6
// (SIIT-translated ::ffff:0:0/96, IPv4-compatible, NAT64, 6to4), through the
// IPv6 ranges that carry IPv4 or are not internet hosts (Teredo, local-use NAT64,
// documentation, the rest of ::/8), nor name port 0: refused when an endpoint is
// saved and again at connect time, on the address actually dialed.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sendWebhook } from '../../src/delivery/http.js';
import { checkEndpointUrl, isBlockedAddress } from '../../src/delivery/ssrf.js';
import type { Platform } from '../../src/platform.js';
import { createAccount, type ApiClient } from '../support/api.js';
import { count, createTestDatabase, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';
import { startReceiver, type Receiver } from '../support/receiver.js';

let db: TestDatabase;
let platform: Platform;
let acme: ApiClient;
let receiver: Receiver;

beforeAll(async () => {
  db = await createTestDatabase();
  platform = await startTestPlatform({
    databaseUrl: db.url,
    roles: ['api'],
    env: { HANDSET_ALLOW_PRIVATE_WEBHOOK_URLS: 'false' },
  });
  acme = await createAccount(db.pool, platform.apiUrl!, 'SSRF');
  receiver = await startReceiver();
});
afterAll(async () => {
  await receiver.close();
  await platform.stop();
  await db.drop();
});

const BLOCKED = [
  '::ffff:0:127.0.0.1', // SIIT-translated loopback
  '::ffff:0:7f00:1',
  '::ffff:0:a9fe:a9fe', // SIIT-translated 169.254.169.254
  '::ffff:0:10.0.0.1',
  '::127.0.0.1', // IPv4-compatible
  '64:ff9b::127.0.0.1', // NAT64 well-known prefix, private inside
  '64:ff9b::a9fe:a9fe',
  '64:ff9b:1::8.8.8.8', // local-use NAT64: whatever is inside
  '64:ff9b:0:0:1::1', // the rest of 64:ff9b::/32
  '2002:a9fe:a9fe::1', // 6to4 of 169.254.169.254
  '2001:0:4136:e378:8000:63bf:80ff:fffe', // Teredo (its client, 127.0.0.1, hidden inverted)
  '2001:2::1', // benchmarking
  '3fff::1', // documentation
  '5f00::1', // SRv6 segment ids
  '::1:2:3:4', // the rest of ::/8
  '::ffff:1:7f00:1',
];
const ALLOWED = ['::ffff:0:8.8.8.8', '64:ff9b::8.8.8.8', '2002:808:808::1', '2001:200::1', '2606:4700:4700::1111'];

describe('addresses', () => {
  it('IPv4 inside IPv6 is judged by the IPv4; the translation and tunnel ranges that are not hosts are refused', () => {
    expect(BLOCKED.filter((a) => !isBlockedAddress(a))).toEqual([]);
    expect(ALLOWED.filter(isBlockedAddress)).toEqual([]);
  });
});

describe('when an endpoint is saved', () => {
  it.each([
    ...BLOCKED.slice(0, 13).map((a) => [`https://[${a}]/hooks`, 'url_not_allowed']),
    ['https://[::ffff:0:127.0.0.1]:8443/hooks', 'url_not_allowed'],
    ['https://example.com:0/hooks', 'invalid_url'],
    ['https://8.8.8.8:0/hooks', 'invalid_url'],
  ])('%s is refused (%s) and nothing is created', async (url, code) => {
    const res = await acme.post('/v1/webhook_endpoints', { url });
    expect([res.status, res.json.code, res.json.param]).toEqual([422, code, 'url']);
    expect(await count(db.pool, 'SELECT * FROM webhook_endpoints WHERE url = $1', [url])).toBe(0);
  });

  it('port 0 is refused even where private addresses are allowed (dev)', async () => {
    expect(await checkEndpointUrl('http://127.0.0.1:0/hooks', true)).toMatchObject({ ok: false, code: 'invalid_url' });
    expect(await checkEndpointUrl('http://127.0.0.1:8080/hooks', true)).toMatchObject({ ok: true });
  });
});

describe('at connect time', () => {
  it('a saved URL with IPv4 hidden in IPv6 is never dialed', async () => {
    const { port } = new URL(receiver.url);
    for (const a of ['::ffff:0:127.0.0.1', '64:ff9b::127.0.0.1', '::127.0.0.1', '2002:7f00:1::1']) {
      for (const scheme of ['https', 'http']) {
        const r = await sendWebhook(`${scheme}://[${a}]:${port}/hooks`, {}, '{}', {
          timeoutMs: 2000,
          allowPrivate: false,
        });
        expect([a, scheme, r.status, r.error]).toEqual([a, scheme, null, 'blocked address']);
      }
    }
    expect(receiver.received).toHaveLength(0);
  });

  it('a host name that resolves to a blocked address is refused on the address dialed, over a kept-alive pool too', async () => {
    const { port } = new URL(receiver.url);
    // The same origin is first dialed with private addresses allowed (its pooled
    // connection is kept alive): the guarded path must not reuse it.
    expect(
      (await sendWebhook(`http://localhost:${port}/hooks`, {}, '{}', { timeoutMs: 2000, allowPrivate: true })).status,
    ).toBe(200);
    const before = receiver.received.length;
    for (const scheme of ['http', 'https']) {
      const r = await sendWebhook(`${scheme}://localhost:${port}/hooks`, {}, '{}', {
        timeoutMs: 2000,
        allowPrivate: false,
      });
      expect([scheme, r.status, r.error]).toEqual([scheme, null, 'blocked address']);
    }
    expect(receiver.received).toHaveLength(before);
  });

  it('port 0 is never dialed, whether or not private addresses are allowed; the same URL on its real port is', async () => {
    for (const allowPrivate of [false, true]) {
      const r = await sendWebhook('http://127.0.0.1:0/hooks', {}, '{}', { timeoutMs: 2000, allowPrivate });
      expect([r.status, r.error]).toEqual([null, 'blocked port']);
    }
    expect((await sendWebhook(receiver.url, {}, '{}', { timeoutMs: 2000, allowPrivate: true })).status).toBe(200);
  });
});
