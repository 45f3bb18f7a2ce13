// Fair share against several noisy accounts: however many accounts have endpoints
// that accept connections and never answer, a quiet account's webhooks stay
// within 2× of their latency without them. Each phase starts 1, 2 or 5 fresh
// noisy accounts of 12 hanging endpoints each (fresh: their endpoints look
// healthy, so their first attempts take delivery slots, not lanes), then
// measures rounds of five quiet webhooks emitted at once, and compares their
// median with the same measurement taken in the same run without the noise
// (never a fixed bound). The window is 3 s, so a quiet webhook that waits for a slot waits for
// a noisy attempt to time out.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withTx } from '../../src/db/tx.js';
import { emit } from '../../src/outbox/outbox.js';
import type { Platform } from '../../src/platform.js';
import { type ApiClient, createAccount } from '../support/api.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';
import { type Receiver, startReceiver } from '../support/receiver.js';

const CONCURRENCY = 32;
const PER_ACCOUNT = 16;
const NOISY_ENDPOINTS = 12;
const NOISY_EVENTS = 3; // each to all 12 endpoints: 36 attempts wanted per account, more than its share
const SAMPLES = 5;
const ROUNDS = 3;

let db: TestDatabase;
let platform: Platform;
let quiet: ApiClient;
let quietRx: Receiver;
const receivers: Receiver[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  platform = await startTestPlatform({
    databaseUrl: db.url,
    roles: ['api', 'worker'],
    env: {
      HANDSET_DELIVERY_CONCURRENCY: String(CONCURRENCY),
      HANDSET_DELIVERY_PER_ACCOUNT: String(PER_ACCOUNT),
      HANDSET_DELIVERY_TIMEOUT: '3s',
      // A noisy attempt that times out is retried an hour later: long after the test.
      HANDSET_DELIVERY_RETRY_SCHEDULE: '1h',
    },
  });
  quiet = await createAccount(db.pool, platform.apiUrl!, 'Quiet');
  quietRx = await startReceiver();
  receivers.push(quietRx);
  const res = await quiet.post('/v1/webhook_endpoints', { url: quietRx.url });
  expect(res.status).toBe(201);
  quietRx.secrets = [res.json.secret];
});
afterAll(async () => {
  await platform.stop();
  for (const r of receivers) await r.close();
  await db.drop();
});

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

let sample = 0;
/** Emits SAMPLES events of the quiet account at once; the ms from each one's commit to its arrival. */
async function quietLatencies(): Promise<number[]> {
  const ids = await Promise.all(
    Array.from({ length: SAMPLES }, async () => {
      const n = sample++;
      const { eventId } = await withTx(db.pool, (tx) =>
        emit(tx, {
          accountId: quiet.accountId,
          tenantId: null,
          type: 'message.delivered',
          subjectId: `msg_quiet_${n}`,
          data: { id: `msg_quiet_${n}`, status: 'delivered' },
          occurredAt: new Date(),
        }),
      );
      return { eventId, committed: Date.now() };
    }),
  );
  const arrivals = await eventually(
    async () => {
      const got = ids.map(({ eventId, committed }) => {
        const r = quietRx.received.find((x) => x.headers['webhook-id'] === eventId);
        return r ? r.at - committed : null;
      });
      return got.every((ms) => ms !== null) ? (got as number[]) : null;
    },
    30_000,
    5,
  );
  return arrivals;
}

/** `accounts` fresh accounts of NOISY_ENDPOINTS endpoints that never answer, each sent NOISY_EVENTS events. */
async function noise(accounts: number, phase: string) {
  const hang = await startReceiver();
  receivers.push(hang);
  hang.answer = () => ({ status: 200, hang: true });
  const endpoints: string[] = [];
  const noisy: ApiClient[] = [];
  for (let a = 0; a < accounts; a++) {
    const c = await createAccount(db.pool, platform.apiUrl!, `Noisy ${phase}.${a}`);
    noisy.push(c);
    for (let e = 0; e < NOISY_ENDPOINTS; e++) {
      const res = await c.post('/v1/webhook_endpoints', { url: `${hang.url}/${a}/${e}` });
      expect(res.status).toBe(201);
      endpoints.push(res.json.id);
    }
  }
  // Every account's events at once, so all of them start hanging together.
  await Promise.all(
    noisy.map((c, a) =>
      withTx(db.pool, async (tx) => {
        for (let i = 0; i < NOISY_EVENTS; i++) {
          await emit(tx, {
            accountId: c.accountId,
            tenantId: null,
            type: 'message.delivered',
            subjectId: `msg_noise_${phase}_${a}_${i}`,
            data: { id: `msg_noise_${phase}_${a}_${i}`, status: 'delivered' },
            occurredAt: new Date(),
          });
        }
      }),
    ),
  );
  // The noisy attempts are in flight (as many as they are given) before the quiet account is measured.
  await eventually(async () => hang.received.length >= Math.min(PER_ACCOUNT, accounts * NOISY_ENDPOINTS), 10_000, 5);
  let seen = -1;
  await eventually(
    async () => {
      const settled = hang.received.length === seen;
      seen = hang.received.length;
      return settled;
    },
    10_000,
    100,
  );
  return {
    hanging: () => hang.received.length,
    /** Ends the noise: its endpoints deleted, its hanging attempts cut and recorded. */
    async stop() {
      await db.pool.query('UPDATE webhook_endpoints SET deleted_at = now(), enabled = false WHERE id = ANY ($1)', [
        endpoints,
      ]);
      await hang.close();
      await eventually(
        async () =>
          (await count(
            db.pool,
            'SELECT a.id FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id WHERE d.endpoint_id = ANY ($1)',
            [endpoints],
          )) >= hang.received.length,
        15_000,
      );
    },
  };
}

describe('fair share against several noisy accounts', () => {
  it('a quiet account’s webhooks stay within 2× of their unloaded latency while 1, 2 and 5 accounts’ endpoints hang', async () => {
    await quietLatencies(); // warm: the quiet endpoint has answered (fast) once
    // Unloaded: rounds before each phase, all of them together (the machine's load varies over the run).
    const unloadedSamples: number[] = [];
    const results: { noisy: number; hanging: number; quietMs: number }[] = [];
    for (const accounts of [1, 2, 5]) {
      for (let r = 0; r < ROUNDS; r++) unloadedSamples.push(...(await quietLatencies()));
      const n = await noise(accounts, String(accounts));
      const loaded: number[] = [];
      for (let r = 0; r < ROUNDS; r++) loaded.push(...(await quietLatencies()));
      results.push({ noisy: accounts, hanging: n.hanging(), quietMs: median(loaded) });
      await n.stop();
    }
    const unloaded = median(unloadedSamples);
    console.log(
      `quiet account's webhooks (rounds of ${SAMPLES} emitted at once), median: ${unloaded} ms unloaded (${unloadedSamples.length} samples); ${results
        .map(
          (r) => `${r.quietMs} ms with ${r.noisy} noisy (${ROUNDS * SAMPLES} samples; ${r.hanging} attempts hanging)`,
        )
        .join('; ')}`,
    );
    for (const r of results) {
      expect(r.quietMs, `with ${r.noisy} noisy accounts`).toBeLessThanOrEqual(2 * unloaded);
    }
  });
});
