// The delivery figure is measured from the emit's commit: its rate, and the CPU
// split beside it. Emitting the events is the bench's set-up, so the CPU watch
// must start only once they are all committed, never while they are written.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { keyring, newSecretKey } from '../../src/delivery/keyring.js';
import { createCustomer, runDelivery } from '../../src/tools/bench/pipeline.js';
import { startReceiver, type Receiver } from '../../src/tools/bench/receiver.js';
import { count, createTestDatabase, type TestDatabase } from '../support/db.js';

let db: TestDatabase;
let receiver: Receiver;

beforeAll(async () => {
  db = await createTestDatabase();
  receiver = await startReceiver(() => 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
});
afterAll(async () => {
  await receiver?.close();
  await db?.drop();
});

class Measured extends Error {}

describe('a delivery run', () => {
  it('starts its CPU watch once every event is committed, not while the bench emits them', async () => {
    const customer = await createCustomer(
      db.pool,
      keyring([Buffer.from(newSecretKey(), 'base64')]),
      `${receiver.url}/0`,
    );
    // What another connection sees when the measurement starts; then the run stops there (no worker runs here).
    let seenAtStart: Promise<number> | undefined;
    const run = runDelivery({
      pool: db.pool,
      receiver,
      customers: [customer],
      events: 25,
      watchCpu: () => {
        seenAtStart = count(db.pool, 'SELECT 1 FROM outbound_events');
        throw new Measured();
      },
    });
    await expect(run).rejects.toBeInstanceOf(Measured);
    expect(await seenAtStart).toBe(25);
  });
});
