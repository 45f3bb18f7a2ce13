// Baseline H is the floor under ingest's CPU per webhook only if it does ingest's
// work short of the write: it must check every signature as ingest does and keep
// nothing. Run as the bench runs it, from the build, as its own process.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cpuPerAnswered, type Measured } from '../../src/tools/bench/report.js';
import type { RoleProcess } from '../../src/tools/bench/roles.js';
import { count, createTestDatabase, type TestDatabase } from '../support/db.js';

const { spawnFloor } = (await import(
  '../../dist/tools/bench/roles.js' as string
)) as typeof import('../../src/tools/bench/roles.js');
const { ReceiptFactory } = (await import(
  '../../dist/tools/bench/webhooks.js' as string
)) as typeof import('../../src/tools/bench/webhooks.js');

let db: TestDatabase;
let floor: RoleProcess;
const factory = new ReceiptFactory();

beforeAll(async () => {
  db = await createTestDatabase();
  floor = await spawnFloor({ databaseUrl: db.url, telnyxPublicKey: factory.publicKeyBase64 });
});
afterAll(async () => {
  await floor?.stop();
  await db?.drop();
});

const post = (body: Buffer, headers: Record<string, string>) =>
  fetch(`${floor.url}/webhooks/telnyx`, { method: 'POST', body, headers });

describe('baseline H, ingest’s server with nothing stored', () => {
  it('answers a well-signed webhook as stored and a forged one 401, and stores neither', async () => {
    const [good] = factory.unique(1);
    const ok = await post(good!.body, good!.headers);
    expect([ok.status, await ok.json()]).toEqual([200, { status: 'stored' }]);

    const forged = Buffer.from(good!.body.toString('utf8').replace('delivered', 'failed'));
    const refused = await post(forged, good!.headers);
    expect([refused.status, await refused.json()]).toEqual([401, { error: 'bad_signature' }]);

    expect(await count(db.pool, 'SELECT 1 FROM carrier_events')).toBe(0);
  });

  it('is weighed per request answered 200: a refused signature is a cheap answer and not counted as one', () => {
    const latency = { count: 200, p50: 1, p99: 1, p999: 1, max: 1, mean: 1 };
    const run: Measured = {
      requests: 200,
      seconds: 1,
      rate: 200,
      statuses: { '200': 100, '401': 100 },
      errors: 0,
      latency,
      exhausted: false,
      cpu: { machine: 0.02, client: 0, postgres: 0, roles: { floor0: 0.01 } },
    };
    // 0.01 core for a second is 10,000 µs, over the 100 requests answered 200.
    expect(cpuPerAnswered(run)).toBe(100);
  });
});
