// A carrier's "slow down" (429 with Retry-After: Telnyx 10011, Twilio 20429)
// fails nothing and moves nothing: the request was not processed, so the message
// waits in the line for the wait the carrier asked for, then goes with the same
// key and bytes. It is not a refusal (the carrier is not marked down) and not a
// reason to fail over. Every message is counted at both simulators.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runAudit } from '../../src/audit/audit.js';
import { type ApiClient, createAccount } from '../support/api.js';
import { startTwoCarriers, type TwoCarriers } from '../support/carriers.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';

const ON_TELNYX = '+13125550801';
const ON_TWILIO = '+13125550802';
const DELIVERS = '+15555550100';
const WAIT_MS = 2_000;

let db: TestDatabase;
let c: TwoCarriers;
let acme: ApiClient;

beforeAll(async () => {
  db = await createTestDatabase();
  c = await startTwoCarriers({ databaseUrl: db.url, env: { HANDSET_CARRIER_DOWN_AFTER: '2' } });
  acme = await createAccount(db.pool, c.platform.apiUrl!, 'Throttled');
  expect((await acme.post('/v1/phone_numbers', { number: ON_TELNYX, carrier: 'telnyx' })).status).toBe(201);
  expect((await acme.post('/v1/phone_numbers', { number: ON_TWILIO, carrier: 'twilio' })).status).toBe(201);
});
afterAll(async () => {
  await c.close();
  await db.drop();
});

async function send(n: number, body: object): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const res = await acme.post('/v1/messages', { to: DELIVERS, body: `slow ${i}`, ...body });
    expect(res.status).toBe(201);
    ids.push(res.json.id);
  }
  return ids;
}

const sentOrDone = (ids: string[]) =>
  count(db.pool, `SELECT * FROM messages WHERE id = ANY($1) AND status IN ('sent', 'delivered')`, [ids]);

describe('a carrier that says slow down', () => {
  it('Telnyx 429 with Retry-After: nothing is asked of it for the wait, nothing fails, nothing fails over', async () => {
    c.telnyx.setBehaviour({ rateLimitRate: 1, retryAfterMs: WAIT_MS });
    const ids = await send(12, { from: ON_TELNYX, fallback_from: ON_TWILIO });
    const sends = () => c.telnyx.requests.filter((r) => r.method === 'POST' && r.path === '/v2/messages');
    const first429 = await eventually(async () => sends().find((r) => r.status === 429), 20_000, 20);
    // Within the wait only the requests already under way when the 429 came may arrive.
    await new Promise((r) => setTimeout(r, WAIT_MS / 2));
    c.telnyx.setBehaviour({ rateLimitRate: 0 });
    await eventually(async () => (await sentOrDone(ids)) === ids.length, 30_000, 100);

    const t0 = Date.parse(first429.at);
    const during = sends().filter((r) => Date.parse(r.at) > t0 + 500 && Date.parse(r.at) < t0 + WAIT_MS);
    expect(during).toEqual([]);
    expect(ids.map((id) => [c.telnyxAccepted(id), c.twilio.acceptedFor(id)])).toEqual(ids.map(() => [1, 0]));
    expect(
      await count(db.pool, 'SELECT * FROM messages WHERE id = ANY($1) AND failover_reason IS NOT NULL', [ids]),
    ).toBe(0);
    expect(await count(db.pool, `SELECT * FROM carrier_health WHERE carrier = 'telnyx' AND state <> 'up'`)).toBe(0);
    expect(await count(db.pool, 'SELECT * FROM usage_records WHERE source_id = ANY($1)', [ids])).toBe(ids.length);
  });

  it('Twilio 20429: each message waits and goes once, never counted as an unknown outcome', async () => {
    c.twilio.setBehaviour({ rateLimitRate: 0.5, retryAfterMs: 1_000 });
    const ids = await send(10, { from: ON_TWILIO });
    await eventually(async () => (await sentOrDone(ids)) === ids.length, 40_000, 100);
    c.twilio.setBehaviour({ rateLimitRate: 0 });
    expect(ids.map((id) => c.twilio.acceptedFor(id))).toEqual(ids.map(() => 1));
    expect(
      await count(db.pool, `SELECT * FROM message_sends WHERE message_id = ANY($1) AND outcome = 'unknown'`, [ids]),
    ).toBe(0);
    expect(await count(db.pool, `SELECT * FROM messages WHERE id = ANY($1) AND status = 'failed'`, [ids])).toBe(0);
    await eventually(
      async () => (await count(db.pool, 'SELECT * FROM carrier_events WHERE processed_at IS NULL')) === 0,
    );
    const audit = await runAudit(db.pool, { graceSeconds: 0 });
    expect(audit.checks.filter((x) => x.violations > 0)).toEqual([]);
  });
});
