// The batched dispatcher under faults: a worker process killed mid-batch, the
// database cut mid-batch, a carrier that stalls some answers. Messages go through
// both carriers (Telnyx replays a repeated Idempotency-Key; Twilio does not, and
// is looked at before any resend), and each is counted at its simulator: taken at
// most once per carrier, none lost, billed once, one message.sent, audit clean.
// The worker runs as a real process (so it can be killed), its database reached
// through a proxy the test cuts; the API and ingest run in this process.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runAudit } from '../../src/audit/audit.js';
import { type ApiClient, createAccount } from '../support/api.js';
import { startTwoCarriers, type TwoCarriers } from '../support/carriers.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { type HandsetProcess, serveRoles } from '../support/process.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';

const ON_TELNYX = '+13125550701';
const ON_TWILIO = '+13125550702';
const DELIVERS = '+15555550100';

let db: TestDatabase;
let proxy: TcpProxy;
let c: TwoCarriers;
let acme: ApiClient;
const workers: HandsetProcess[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  proxy = await startTcpProxy('127.0.0.1', Number(new URL(db.url).port));
  c = await startTwoCarriers({ databaseUrl: db.url, roles: ['api', 'ingest'] });
  acme = await createAccount(db.pool, c.platform.apiUrl!, 'Batched');
  expect((await acme.post('/v1/phone_numbers', { number: ON_TELNYX, carrier: 'telnyx' })).status).toBe(201);
  expect((await acme.post('/v1/phone_numbers', { number: ON_TWILIO, carrier: 'twilio' })).status).toBe(201);
});
afterAll(async () => {
  for (const w of workers) w.child.kill('SIGKILL');
  await c.close();
  await proxy.close();
  await db.drop();
});

/** A worker process, its database through the proxy; leases short, so a dead one's messages come back soon. */
async function worker(env: Record<string, string> = {}): Promise<HandsetProcess> {
  const u = new URL(db.url);
  u.port = String(proxy.port);
  const { proc } = await serveRoles('worker', {
    ...c.env,
    DATABASE_URL: u.toString(),
    HANDSET_WORKER_STALE_AFTER: '2s',
    HANDSET_CARRIER_TIMEOUT: '1s',
    HANDSET_RECONCILE_INTERVAL: '1h',
    ...env,
  });
  workers.push(proc);
  return proc;
}

/** Half through each carrier. */
async function campaign(n: number, tag: string): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const from = i % 2 === 0 ? ON_TELNYX : ON_TWILIO;
    const res = await acme.post('/v1/messages', { from, to: DELIVERS, body: `${tag} ${i}` });
    expect(res.status).toBe(201);
    ids.push(res.json.id);
  }
  return ids;
}

const taken = (id: string) => c.telnyxAccepted(id) + c.twilio.acceptedFor(id);
/** Every request Telnyx got with this Idempotency-Key: taken, replayed, or refused as still in flight. */
const telnyxAsked = (id: string) =>
  c.telnyx.requests.filter((r) => r.method === 'POST' && r.path === '/v2/messages' && r.idempotencyKey === id).length;

/** Every message sent once at one carrier, billed once, announced once; the audit clean. */
async function allOnce(ids: string[]): Promise<void> {
  await eventually(
    async () =>
      (await count(db.pool, `SELECT * FROM messages WHERE id = ANY($1) AND status IN ('sent', 'delivered')`, [ids])) ===
      ids.length,
    60_000,
    250,
  );
  const per = ids.map((id) => ({ id, telnyx: c.telnyxAccepted(id), twilio: c.twilio.acceptedFor(id) }));
  expect(JSON.stringify(per.filter((p) => p.telnyx + p.twilio !== 1))).toBe('[]');
  expect(await count(db.pool, 'SELECT * FROM usage_records WHERE source_id = ANY($1)', [ids])).toBe(ids.length);
  expect(
    await count(db.pool, `SELECT * FROM outbound_events WHERE subject_id = ANY($1) AND type = 'message.sent'`, [ids]),
  ).toBe(ids.length);
  await eventually(async () => (await count(db.pool, 'SELECT * FROM carrier_events WHERE processed_at IS NULL')) === 0);
  const audit = await runAudit(db.pool, { graceSeconds: 0 });
  expect(JSON.stringify(audit.checks.filter((x) => x.violations > 0))).toBe('[]');
}

describe('batched dispatch under faults', () => {
  it('a message held past its first lease (waiting for a request slot) is asked of the carrier once: its lease is renewed', async () => {
    // Two requests at a time of a quarter second each, a 3 s lease (1 s stale bound, 1 s carrier timeout):
    // the last of the hand waits about 7 s for its slot. A lease that ran out meanwhile would hand the
    // message to a job, which asks Telnyx again while the dispatcher still holds it.
    c.telnyx.setBehaviour({ sendLatencyMs: 250 });
    const ids: string[] = [];
    for (let i = 0; i < 60; i++) {
      const res = await acme.post('/v1/messages', { from: ON_TELNYX, to: DELIVERS, body: `held ${i}` });
      expect(res.status).toBe(201);
      ids.push(res.json.id);
    }
    const w = await worker({ HANDSET_WORKER_STALE_AFTER: '1s', HANDSET_DISPATCH_CONCURRENCY: '2' });
    try {
      await allOnce(ids);
      expect(JSON.stringify(ids.map((id) => ({ id, asked: telnyxAsked(id) })).filter((x) => x.asked !== 1))).toBe('[]');
    } finally {
      c.telnyx.setBehaviour({ sendLatencyMs: 0 });
      w.child.kill('SIGTERM');
      await w.exited;
    }
  });

  it('a send recorded late keeps the moment the carrier took it: sent_at is its answer, not its batch’s write', async () => {
    // Billing's table locked against inserts: every record of a sent message waits until the lock is gone.
    const w = await worker();
    const lock = await db.pool.connect();
    const ids: string[] = [];
    try {
      await lock.query('BEGIN');
      await lock.query('LOCK TABLE usage_records IN SHARE MODE');
      for (let i = 0; i < 3; i++) {
        const res = await acme.post('/v1/messages', { from: ON_TELNYX, to: DELIVERS, body: `recorded late ${i}` });
        expect(res.status).toBe(201);
        ids.push(res.json.id);
      }
      await eventually(async () => ids.every((id) => c.telnyxAccepted(id) === 1), 20_000, 50);
      await new Promise((r) => setTimeout(r, 2_000));
    } finally {
      await lock.query('COMMIT');
      lock.release();
    }
    try {
      await allOnce(ids);
      const { rows } = await db.pool.query<{ id: string; sent_at: Date }>(
        'SELECT id, sent_at FROM messages WHERE id = ANY($1)',
        [ids],
      );
      for (const r of rows) {
        const asked = c.telnyx.requests.find(
          (q) => q.method === 'POST' && q.path === '/v2/messages' && q.idempotencyKey === r.id,
        )!;
        expect(Math.abs(r.sent_at.getTime() - Date.parse(asked.at))).toBeLessThan(1_000);
      }
    } finally {
      w.child.kill('SIGTERM');
      await w.exited;
    }
  });

  it('a worker killed mid-batch: its claimed messages are sent by another, each once per carrier, none lost', async () => {
    // Slow answers, so the kill lands with requests in flight and messages claimed but not yet sent.
    c.telnyx.setBehaviour({ sendLatencyMs: 150 });
    c.twilio.setBehaviour({ sendLatencyMs: 150 });
    const ids = await campaign(40, 'killed');
    const first = await worker();
    await eventually(async () => ids.filter((id) => taken(id) > 0).length >= 6, 30_000, 20);
    first.child.kill('SIGKILL');
    await first.exited;
    const leased = await count(
      db.pool,
      'SELECT * FROM messages WHERE id = ANY($1) AND dispatch_lease_until IS NOT NULL',
      [ids],
    );
    expect(leased).toBeGreaterThan(0);
    c.telnyx.setBehaviour({ sendLatencyMs: 0 });
    c.twilio.setBehaviour({ sendLatencyMs: 0 });
    const second = await worker();
    try {
      await allOnce(ids);
    } finally {
      second.child.kill('SIGTERM');
      await second.exited;
    }
  });

  it('the database cut mid-batch: what the carriers took is recorded once it is back, nothing sent twice', async () => {
    c.telnyx.setBehaviour({ sendLatencyMs: 200 });
    c.twilio.setBehaviour({ sendLatencyMs: 200 });
    const ids = await campaign(30, 'cut');
    const w = await worker();
    try {
      await eventually(async () => ids.filter((id) => taken(id) > 0).length >= 5, 30_000, 20);
      proxy.cut();
      await new Promise((r) => setTimeout(r, 1_500));
      proxy.restore();
      c.telnyx.setBehaviour({ sendLatencyMs: 0 });
      c.twilio.setBehaviour({ sendLatencyMs: 0 });
      await allOnce(ids);
      expect(w.child.exitCode).toBe(null);
    } finally {
      w.child.kill('SIGTERM');
      await w.exited;
    }
  });

  it('a carrier that stalls some answers: each stalled send is asked again, never taken twice', async () => {
    c.telnyx.setBehaviour({ stalledBodyRate: 0.2, lostAnswerRate: 0.1 });
    c.twilio.setBehaviour({ stalledBodyRate: 0.2, lostAnswerRate: 0.1 });
    const ids = await campaign(30, 'stalls');
    const w = await worker();
    try {
      await eventually(async () => ids.every((id) => taken(id) > 0), 30_000, 50);
      c.telnyx.setBehaviour({ stalledBodyRate: 0, lostAnswerRate: 0 });
      c.twilio.setBehaviour({ stalledBodyRate: 0, lostAnswerRate: 0 });
      await allOnce(ids);
    } finally {
      w.child.kill('SIGTERM');
      await w.exited;
    }
  });
});
