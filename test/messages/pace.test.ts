// A number's sending rate (`mps`) holds across worker processes: two workers
// share one pace kept in PostgreSQL, so the carrier sees the number's messages
// at its rate, not at twice it. Counted at the simulator, by arrival.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { type ApiClient, createAccount } from '../support/api.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { type HandsetProcess, serveRoles } from '../support/process.js';
import { startTestPlatform } from '../support/platform.js';
import type { Platform } from '../../src/platform.js';

const PACED = '+13125550901';
const FREE = '+13125550902';
const MPS = 5;
const MESSAGES = 50;
const STALLED = '+13125550903';

let db: TestDatabase;
let sim: Simulator;
let api: Platform;
let acme: ApiClient;
const workers: HandsetProcess[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  sim = await startSimulator({ webhookUrl: null, timeScale: 0.01, seed: 'pace' });
  api = await startTestPlatform({ databaseUrl: db.url, roles: ['api'], env: sim.carrierEnv() });
  acme = await createAccount(db.pool, api.apiUrl!, 'Paced');
});
afterAll(async () => {
  for (const w of workers) w.child.kill('SIGKILL');
  await api.stop();
  await sim.close();
  await db.drop();
});

describe('a number with mps', () => {
  it('is refused outside 1–1000 and shown on the number', async () => {
    const bad = await acme.post('/v1/phone_numbers', { number: PACED, mps: 0 });
    expect(bad.status).toBe(422);
    const made = await acme.post('/v1/phone_numbers', { number: PACED, mps: MPS });
    expect(made.status).toBe(201);
    expect(made.json.mps).toBe(MPS);
    expect((await acme.post('/v1/phone_numbers', { number: FREE })).json.mps).toBe(null);
  });

  it('sends at its rate across two worker processes (within 5%), never faster; another number is not held back', async () => {
    for (let i = 0; i < 2; i++) {
      const { proc } = await serveRoles('worker', { ...sim.carrierEnv(), DATABASE_URL: db.url });
      workers.push(proc);
    }
    const ids: string[] = [];
    for (let i = 0; i < MESSAGES; i++) {
      const res = await acme.post('/v1/messages', { from: PACED, to: '+15555550100', body: `paced ${i}` });
      expect(res.status).toBe(201);
      ids.push(res.json.id);
    }
    const free = (await acme.post('/v1/messages', { from: FREE, to: '+15555550100', body: 'free' })).json.id;
    await eventually(
      async () => (await count(db.pool, `SELECT * FROM messages WHERE id = $1 AND status <> 'queued'`, [free])) === 1,
      5_000,
      50,
    );
    await eventually(
      async () =>
        (await count(db.pool, `SELECT * FROM messages WHERE id = ANY($1) AND status <> 'queued'`, [ids])) ===
        ids.length,
      MESSAGES * (1000 / MPS) * 2,
      200,
    );
    const at = sim.requests
      .filter((r) => r.method === 'POST' && r.path === '/v2/messages' && (r.body as { from?: string }).from === PACED)
      .map((r) => Date.parse(r.at))
      .sort((a, b) => a - b);
    expect(at.length).toBe(MESSAGES);
    const rate = ((at.length - 1) * 1000) / (at.at(-1)! - at[0]!);
    expect(rate).toBeGreaterThan(MPS * 0.95);
    expect(rate).toBeLessThan(MPS * 1.05);
    // Never above: no two seconds see more than their share, one send of arrival jitter allowed.
    const busiest = Math.max(...at.map((t) => at.filter((u) => u >= t && u < t + 2_000).length));
    expect(busiest).toBeLessThanOrEqual(2 * MPS + 1);
  });

  it('a worker paused past its slots does not send the missed ones together: no second sees more than its rate', async () => {
    // Stands for a saturated machine or a long GC pause: the messages in hand wake
    // after their slots have passed, all at once.
    for (const w of workers.splice(0)) w.child.kill('SIGKILL');
    const { proc } = await serveRoles('worker', { ...sim.carrierEnv(), DATABASE_URL: db.url });
    workers.push(proc);
    expect((await acme.post('/v1/phone_numbers', { number: STALLED, mps: MPS })).status).toBe(201);
    const sent = () =>
      sim.requests
        .filter(
          (r) => r.method === 'POST' && r.path === '/v2/messages' && (r.body as { from?: string }).from === STALLED,
        )
        .map((r) => Date.parse(r.at))
        .sort((a, b) => a - b);
    const total = 3 * MPS;
    const made = await acme.post('/v1/messages/batch', {
      messages: Array.from({ length: total }, (_, i) => ({ from: STALLED, to: '+15555550100', body: `stalled ${i}` })),
    });
    expect(made.status).toBe(201);
    await eventually(async () => sent().length >= 1, 10_000, 20);
    proc.child.kill('SIGSTOP');
    await new Promise((r) => setTimeout(r, 2_500));
    proc.child.kill('SIGCONT');
    await eventually(async () => sent().length === total, 30_000, 100);
    const at = sent();
    const busiest = Math.max(...at.map((t) => at.filter((u) => u >= t && u < t + 1_000).length));
    // A send may go up to one slot after its own: one more than the rate in a second, at most.
    expect(busiest).toBeLessThanOrEqual(MPS + 1);
  });
});
