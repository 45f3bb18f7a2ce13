// Retention: processed raw carrier events are deleted after
// HANDSET_CARRIER_EVENT_RETENTION, and a duplicate that arrives after its
// original was deleted still changes nothing — the resource-keyed guards are the
// second layer of exactly-once, and they do not need the event log.

import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { encodeClientState } from '../../src/carrier/telnyx/events.js';
import { runMaintenance } from '../../src/maintenance.js';
import type { Platform } from '../../src/platform.js';
import { startSimulator, telnyxWebhook, type Simulator } from '../../src/sim/simulator.js';
import { createLogger } from '../../src/telemetry/log.js';
import { createAccount, type ApiClient } from '../support/api.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';

const OUR = '+13125550300';
const B = '+14155550302';
let db: TestDatabase;
let sim: Simulator;
let platform: Platform;
let acme: ApiClient;

beforeAll(async () => {
  db = await createTestDatabase();
  sim = await startSimulator({ webhookUrl: null, timeScale: 0.01, seed: 'retention', connectionId: 'conn' });
  sim.setPersona(B, { call: { manual: true } });
  platform = await startTestPlatform({
    databaseUrl: db.url,
    roles: ['ingest', 'api', 'worker'],
    env: sim.carrierEnv(),
  });
  sim.setWebhookUrl(`${platform.ingestUrl}/webhooks/telnyx`);
  acme = await createAccount(db.pool, platform.apiUrl!);
  await acme.post('/v1/phone_numbers', { number: OUR });
});
afterAll(async () => {
  await platform.stop();
  await sim.close();
  await db.drop();
});

const settled = () =>
  eventually(
    async () => (await count(db.pool, 'SELECT * FROM carrier_events WHERE processed_at IS NULL')) === 0,
    20_000,
  );
const outbox = () => count(db.pool, 'SELECT * FROM outbound_events');
const bills = () => count(db.pool, 'SELECT * FROM usage_records');

describe('retention', () => {
  it('deletes processed carrier events past retention, in batches, and never unprocessed ones', async () => {
    await db.pool.query(`INSERT INTO carrier_events (carrier_event_id, event_type, payload, processed_at)
                         SELECT 'old-' || g, 'x', '{}', now() FROM generate_series(1, 12000) g`);
    await db.pool.query(
      `INSERT INTO carrier_events (carrier_event_id, event_type, payload) VALUES ('waiting', 'x', '{}')`,
    );
    const log = createLogger('silent');
    // nothing is old yet
    expect((await runMaintenance({ pool: db.pool, log, carrierEventRetentionMs: 30 * 86_400_000 })).carrierEvents).toBe(
      0,
    );
    const later = new Date(Date.now() + 31 * 86_400_000);
    expect(
      (await runMaintenance({ pool: db.pool, log, carrierEventRetentionMs: 30 * 86_400_000 }, later)).carrierEvents,
    ).toBe(12000);
    expect(await count(db.pool, `SELECT * FROM carrier_events WHERE carrier_event_id = 'waiting'`)).toBe(1);
    await db.pool.query(`DELETE FROM carrier_events WHERE carrier_event_id = 'waiting'`);
  });

  it('a duplicate delivery that arrives after its original was deleted has no effect (messages and calls)', async () => {
    // An inbound SMS, a delivered outbound SMS and a completed call, all settled.
    const sms = telnyxWebhook.messageReceived({
      messageId: randomUUID(),
      from: '+14155550111',
      to: OUR,
      text: 'hello',
      eventId: randomUUID(),
    });
    await sim.deliver(sms);
    const sent = await acme.post('/v1/messages', { from: OUR, to: '+15555550100', body: 'hi' });
    const msg = await eventually(async () => {
      const m = (await acme.get(`/v1/messages/${sent.json.id}`)).json;
      return m.status === 'delivered' && m;
    }, 20_000);
    const call = await acme.post('/v1/calls', { from: OUR, to: [B] });
    const leg = await eventually(
      async () =>
        (await db.pool.query('SELECT * FROM call_legs WHERE call_id = $1 AND carrier_ref IS NOT NULL', [call.json.id]))
          .rows[0],
    );
    const legFacts = {
      callControlId: leg.carrier_ref,
      from: OUR,
      to: B,
      clientState: encodeClientState({ c: leg.call_id, l: leg.id, p: 0 }),
    };
    const answeredAt = new Date();
    await sim.deliver(telnyxWebhook.callAnswered({ ...legFacts, occurredAt: answeredAt }));
    const hangup = telnyxWebhook.callHangup({
      ...legFacts,
      hangupCause: 'normal_clearing',
      occurredAt: new Date(answeredAt.getTime() + 30_000),
      eventId: randomUUID(),
    });
    await sim.deliver(hangup);
    await eventually(async () => (await acme.get(`/v1/calls/${call.json.id}`)).json.status === 'completed');
    await settled();

    const finalized = (
      await db.pool.query(
        `SELECT payload::text AS body FROM carrier_events WHERE event_type = 'message.finalized' AND payload->'data'->'payload'->>'id' = $1`,
        [msg.carrier_message_id],
      )
    ).rows[0].body as string;
    const before = {
      outbox: await outbox(),
      bills: await bills(),
      messages: await count(db.pool, 'SELECT * FROM messages'),
    };

    // Retention runs; the raw events are gone.
    const later = new Date(Date.now() + 31 * 86_400_000);
    await runMaintenance(
      { pool: db.pool, log: createLogger('silent'), carrierEventRetentionMs: 30 * 86_400_000 },
      later,
    );
    expect(await count(db.pool, 'SELECT * FROM carrier_events')).toBe(0);

    // The carrier delivers the same events again, with the same event ids.
    expect(await sim.deliver(sms)).toBe(200);
    expect(await sim.deliver(finalized)).toBe(200);
    expect(await sim.deliver(hangup)).toBe(200);
    await settled();
    expect(await count(db.pool, 'SELECT * FROM carrier_events')).toBe(3); // stored again: the unique index forgot them
    expect({
      outbox: await outbox(),
      bills: await bills(),
      messages: await count(db.pool, 'SELECT * FROM messages'),
    }).toEqual(before);
    expect((await acme.get(`/v1/messages/${msg.id}`)).json.status).toBe('delivered');
    expect((await acme.get(`/v1/calls/${call.json.id}`)).json).toMatchObject({
      status: 'completed',
      duration_seconds: 30,
    });
  });
});
