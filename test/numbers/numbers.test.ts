// Numbers you really own: a claim is checked with the carrier (the simulator's
// inventory, over GET /v2/phone_numbers); a number the carrier account does not
// hold and one another account holds get the same answer, after the same carrier
// lookup, and change nothing; one's own number again is 409; a carrier that cannot
// be asked is 503. A release frees the number for another account, is 404 for
// another account's, and waits for (then refuses) sends and calls still using it.
// The Telnyx adapter reads Telnyx's answer exactly (digits-only filter, the one
// exact number, a released number not held).

import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { telnyxClient } from '../../src/carrier/telnyx/client.js';
import { withTx } from '../../src/db/tx.js';
import { createMessage } from '../../src/messages/messages.js';
import { numberRelease } from '../../src/numbers/numbers.js';
import type { Platform } from '../../src/platform.js';
import { NOT_OURS, type Simulator, startSimulator } from '../../src/sim/simulator.js';
import { createAccount, type ApiClient } from '../support/api.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';

let db: TestDatabase;
let sim: Simulator;
let platform: Platform;
let acme: ApiClient;
let globex: ApiClient;

beforeAll(async () => {
  db = await createTestDatabase();
  sim = await startSimulator({ webhookUrl: null, seed: 'numbers' });
  platform = await startTestPlatform({ databaseUrl: db.url, roles: ['api'], env: sim.carrierEnv() });
  acme = await createAccount(db.pool, platform.apiUrl!, 'Acme');
  globex = await createAccount(db.pool, platform.apiUrl!, 'Globex');
});
afterAll(async () => {
  await platform.stop();
  await sim.close();
  await db.drop();
});

const numbers = () => count(db.pool, 'SELECT * FROM phone_numbers');
const inventoryLookups = () => sim.requests.filter((r) => r.path.startsWith('/v2/phone_numbers')).length;

describe('claiming a number', () => {
  it('one the carrier account does not hold and one another account holds get the same answer', async () => {
    const HELD = '+13125550301';
    expect((await acme.post('/v1/phone_numbers', { number: HELD })).status).toBe(201);
    const before = await numbers();

    const answers = [];
    for (const number of [NOT_OURS[0]!, '+14158675309', HELD]) {
      const lookups = inventoryLookups();
      const res = await globex.post('/v1/phone_numbers', { number });
      expect(inventoryLookups() - lookups, number).toBe(1); // the carrier is asked in every case alike
      answers.push({
        status: res.status,
        type: res.headers.get('content-type'),
        body: JSON.stringify(res.json).replaceAll(number, '<number>'),
      });
    }
    expect(answers[0]!.status).toBe(422);
    expect(JSON.parse(answers[0]!.body)).toMatchObject({ code: 'number_unavailable', param: 'number' });
    expect(answers[1]).toEqual(answers[0]);
    expect(answers[2]).toEqual(answers[0]);
    expect(await numbers()).toBe(before);
    expect(await count(db.pool, 'SELECT * FROM idempotency_keys')).toBe(0);
  });

  it('the carrier is asked for the number itself: added to or taken out of its account, the claim follows', async () => {
    const OUTSIDE = '+14158675310';
    expect((await acme.post('/v1/phone_numbers', { number: OUTSIDE })).status).toBe(422);
    sim.addNumber(OUTSIDE);
    expect((await acme.post('/v1/phone_numbers', { number: OUTSIDE })).status).toBe(201);
    const GONE = '+13125550302';
    sim.removeNumber(GONE);
    expect((await acme.post('/v1/phone_numbers', { number: GONE })).json.code).toBe('number_unavailable');
    const lookup = sim.requests.filter((r) => r.path.startsWith('/v2/phone_numbers')).at(-1)!;
    expect(decodeURIComponent(lookup.path)).toContain('filter[phone_number]=13125550302');
  });

  it('one of its own again is 409 number_exists and changes nothing', async () => {
    const MINE = '+13125550303';
    expect((await acme.post('/v1/phone_numbers', { number: MINE })).status).toBe(201);
    const before = await numbers();
    const again = await acme.post('/v1/phone_numbers', { number: MINE });
    expect(again.status).toBe(409);
    expect(again.json).toMatchObject({ code: 'number_exists', param: 'number' });
    expect(await numbers()).toBe(before);
  });

  it('a carrier that cannot be asked is 503 with Retry-After, and nothing is stored', async () => {
    const cut = await startTestPlatform({
      databaseUrl: db.url,
      roles: ['api'],
      env: { TELNYX_API_URL: 'http://127.0.0.1:9/v2' },
    });
    try {
      const before = await numbers();
      const res = await fetch(`${cut.apiUrl}/v1/phone_numbers`, {
        method: 'POST',
        headers: { authorization: `Bearer ${acme.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ number: '+13125550304' }),
      });
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBe('5');
      expect(((await res.json()) as { code: string }).code).toBe('carrier_unavailable');
      expect(await numbers()).toBe(before);
    } finally {
      await cut.stop();
    }
  });
});

describe('releasing a number', () => {
  it("frees it for another account; another account's is 404 and stays", async () => {
    const n = (await acme.post('/v1/phone_numbers', { number: '+13125550310' })).json;
    const theirs = await globex.delete(`/v1/phone_numbers/${n.id}`);
    expect(theirs.status).toBe(404);
    expect(theirs.json.code).toBe('resource_not_found');
    expect((await acme.get(`/v1/phone_numbers/${n.id}`)).status).toBe(200);
    expect((await globex.post('/v1/phone_numbers', { number: '+13125550310' })).status).toBe(422);

    const released = await acme.delete(`/v1/phone_numbers/${n.id}`);
    expect(released.status).toBe(200);
    expect(released.json).toEqual({ id: n.id, deleted: true });
    expect((await acme.get(`/v1/phone_numbers/${n.id}`)).status).toBe(404);
    expect((await acme.delete(`/v1/phone_numbers/${n.id}`)).status).toBe(404);
    expect((await acme.post('/v1/messages', { from: '+13125550310', to: '+15555550100', body: 'x' })).json.code).toBe(
      'from_not_owned',
    );
    expect((await globex.post('/v1/phone_numbers', { number: '+13125550310' })).status).toBe(201);
  });

  it('is refused while a call on it rings or a message from it waits to be sent, and not after', async () => {
    const n = (await acme.post('/v1/phone_numbers', { number: '+13125550311' })).json;
    const m = await acme.post('/v1/messages', {
      from: '+13125550311',
      to: '+15555550100',
      body: 'later',
      send_at: new Date(Date.now() + 3_600_000).toISOString(),
    });
    expect(m.status).toBe(201);
    const busy = await acme.delete(`/v1/phone_numbers/${n.id}`);
    expect(busy.status).toBe(409);
    expect(busy.json).toMatchObject({ code: 'number_in_use' });
    expect(busy.json.detail).toMatch(/0 call\(s\).*1 message\(s\)/);
    expect((await acme.post(`/v1/messages/${m.json.id}/cancel`)).status).toBe(200);

    const call = await acme.post('/v1/calls', { from: '+13125550311', to: ['+15555550110'] });
    expect(call.json.status).toBe('ringing'); // no worker here: it stays ringing
    expect((await acme.delete(`/v1/phone_numbers/${n.id}`)).json.detail).toMatch(/1 call\(s\)/);
    await db.pool.query(`UPDATE calls SET status = 'missed', ended_at = now() WHERE id = $1`, [call.json.id]);
    expect((await acme.delete(`/v1/phone_numbers/${n.id}`)).status).toBe(200);
  });

  it('waits for a send that took the number and counts it, instead of releasing under it', async () => {
    const n = (await acme.post('/v1/phone_numbers', { number: '+13125550312' })).json;
    let release: Promise<Awaited<ReturnType<typeof numberRelease>>> | undefined;
    const sent = await withTx(db.pool, async (tx) => {
      const made = await createMessage(
        tx,
        {
          accountId: acme.accountId,
          from: '+13125550312',
          to: '+15555550100',
          body: 'now',
          mediaUrls: [],
          sendAt: null,
        },
        new Date(),
        'batched',
      );
      release = withTx(db.pool, (other) => numberRelease(other, acme.accountId, n.id));
      // The release is waiting for this transaction's hold on the number.
      await eventually(async () => {
        const { rows } = await db.pool.query(
          `SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`,
        );
        return rows.length > 0;
      });
      return made;
    });
    expect(sent).toMatchObject({ status: 'queued' });
    expect(await release).toEqual({ applied: false, reason: 'in_use', calls: 0, messages: 1 });
    expect((await acme.get(`/v1/phone_numbers/${n.id}`)).status).toBe(200);
  });
});

describe('the Telnyx adapter', () => {
  it('asks with the digits alone and holds only the exact number, not a released one', async () => {
    const seen: string[] = [];
    const telnyx = http.createServer((req, res) => {
      seen.push(decodeURIComponent(req.url ?? ''));
      const data = [
        { phone_number: '+131255503201', status: 'active' }, // contains the digits, is not the number
        { phone_number: '+13125550320', status: req.url?.includes('13125550320') ? 'active' : 'deleted' },
        { phone_number: '+13125550321', status: 'deleted' },
      ];
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ data }));
    });
    await new Promise<void>((r) => telnyx.listen(0, '127.0.0.1', r));
    try {
      const client = telnyxClient({
        apiUrl: `http://127.0.0.1:${(telnyx.address() as AddressInfo).port}/v2`,
        apiKey: 'KEY_test',
      });
      expect(await client.ownsNumber('+13125550320')).toEqual({ ok: true, owned: true });
      expect(await client.ownsNumber('+13125550321')).toEqual({ ok: true, owned: false });
      expect(await client.ownsNumber('+1312555032')).toEqual({ ok: true, owned: false });
      expect(seen[0]).toBe('/v2/phone_numbers?filter[phone_number]=13125550320&page[size]=250');
    } finally {
      telnyx.close();
    }
    const gone = telnyxClient({ apiUrl: 'http://127.0.0.1:9/v2', apiKey: 'KEY_test', timeoutMs: 2000 });
    expect(await gone.ownsNumber('+13125550320')).toMatchObject({ ok: false, kind: 'retry' });
  });
});
