// When the carrier is silent, Handset asks it. The simulator loses webhooks for
// good (a persona's `lose`), exactly as Telnyx does once its few retries failed;
// the platform runs with a short reconciliation interval and bound, finds what
// waits past it, looks it up, and applies the carrier's answer through the same
// store-once path and guards as a webhook. The lost webhooks, delivered at last,
// then change nothing.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Platform } from '../../src/platform.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { createAccount, type ApiClient } from '../support/api.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';
import { runHandset } from '../support/process.js';

const OUR = '+13125550900';
const NO_ANSWER_LOST = '+14155550901'; // never answers; its timeout hangup is lost
const TALKS_LOST = '+14155550902'; // answers after 1 s, talks 3 s; its hangup is lost
const TALKS_LONG = '+14155550903'; // answers, talks 7 s; its webhooks arrive
const RECEIPT_LOST = '+14155550904'; // delivered; the terminal receipt is lost
const RECORDING_LOST = '+14155550905'; // answers, talks 3 s; its call.recording.saved is lost
const RECORDING_ERROR_LOST = '+14155550906'; // answers, talks 3 s; its recording fails and that error is lost
const INTERVAL_MS = 1000;
const AFTER_MS = 2000;
const SLACK_MS = 3000; // processing, a poll, a sweep: what a lookup's answer takes to be applied

let db: TestDatabase;
let sim: Simulator;
let platform: Platform;
let acme: ApiClient;

beforeAll(async () => {
  db = await createTestDatabase();
  sim = await startSimulator({ webhookUrl: null, seed: 'reconcile', connectionId: 'conn-rec' });
  sim.setPersona(NO_ANSWER_LOST, { call: { hangupCause: 'timeout' }, lose: ['call.hangup'] });
  sim.setPersona(TALKS_LOST, { call: { answerAfterMs: 1000, talkMs: 3000 }, lose: ['call.hangup'] });
  sim.setPersona(TALKS_LONG, { call: { answerAfterMs: 500, talkMs: 7000 } });
  sim.setPersona(RECEIPT_LOST, { sms: 'delivered', lose: ['message.finalized'] });
  sim.setPersona(RECORDING_LOST, { call: { answerAfterMs: 500, talkMs: 3000 }, lose: ['call.recording.saved'] });
  sim.setPersona(RECORDING_ERROR_LOST, {
    call: { answerAfterMs: 500, talkMs: 3000 },
    recording: 'error',
    lose: ['call.recording.error'],
  });
  platform = await startTestPlatform({
    databaseUrl: db.url,
    roles: ['ingest', 'api', 'worker'],
    env: {
      ...sim.carrierEnv(),
      HANDSET_RECONCILE_INTERVAL: `${INTERVAL_MS}ms`,
      HANDSET_RECONCILE_AFTER: `${AFTER_MS}ms`,
      HANDSET_RECONCILE_MESSAGE_AFTER: `${AFTER_MS}ms`,
    },
  });
  sim.setWebhookUrl(`${platform.ingestUrl}/webhooks/telnyx`);
  acme = await createAccount(db.pool, platform.apiUrl!, 'Silent carrier');
  expect((await acme.post('/v1/phone_numbers', { number: OUR })).status).toBe(201);
});
afterAll(async () => {
  await platform.stop();
  await sim.close();
  await db.drop();
});

const dialsTo = (to: string) =>
  sim.requests.filter(
    (r) => r.path === '/v2/calls' && r.status === 200 && !r.replayed && (r.body as { to?: string }).to === to,
  );
const lost = (type: string, about: string) =>
  sim.dropped.filter(
    (d) =>
      d.eventType === type &&
      JSON.parse(d.body).data.payload[type.startsWith('call.') ? 'call_control_id' : 'id'] === about,
  );
const sent = (type: string, ccid: string) =>
  sim.webhooks.find((w) => w.eventType === type && JSON.parse(w.body).data.payload.call_control_id === ccid)!;
const events = (id: string, type: string) =>
  count(db.pool, 'SELECT * FROM outbound_events WHERE subject_id = $1 AND type = $2', [id, type]);
const legs = async (callId: string) =>
  (await db.pool.query('SELECT * FROM call_legs WHERE call_id = $1 ORDER BY position', [callId])).rows;

describe('lost call webhooks', () => {
  it('the timeout hangup of a ringing leg and the final hangup of the answered one are lost: the next target is dialed once, the call completes with the carrier’s duration, each within interval + bound', async () => {
    const placed = await acme.post('/v1/calls', { from: OUR, to: [NO_ANSWER_LOST, TALKS_LOST], ring_timeout_secs: 5 });
    expect(placed.status).toBe(201);
    const callId: string = placed.json.id;
    const call = await eventually(async () => {
      const c = (await acme.get(`/v1/calls/${callId}`)).json;
      return c.status === 'completed' && c;
    }, 45_000);

    const [first, second] = await legs(callId);
    // The first leg's ending came from the carrier's record; the next target was dialed once, promptly.
    const firstEnd = Date.parse(JSON.parse(lost('call.hangup', first.carrier_ref)[0]!.body).data.payload.end_time);
    expect(first).toMatchObject({ status: 'no_answer', reconciled: ['hangup'] });
    expect(dialsTo(TALKS_LOST)).toHaveLength(1);
    expect(Date.parse(dialsTo(TALKS_LOST)[0]!.at) - firstEnd).toBeLessThan(INTERVAL_MS + AFTER_MS + SLACK_MS);
    // The call's duration is the carrier's: from its answer webhook to the end its record gives.
    const answeredAt = Date.parse(JSON.parse(sent('call.answered', second.carrier_ref).body).data.occurred_at);
    const secondEnd = Date.parse(JSON.parse(lost('call.hangup', second.carrier_ref)[0]!.body).data.payload.end_time);
    expect(second).toMatchObject({ status: 'completed', reconciled: ['hangup'] });
    expect(call.duration_seconds).toBe(Math.ceil((secondEnd - answeredAt) / 1000));
    expect(Date.parse(call.ended_at)).toBe(secondEnd);
    const completedAt = (
      await db.pool.query(`SELECT created_at FROM outbound_events WHERE subject_id = $1 AND type = 'call.completed'`, [
        callId,
      ])
    ).rows[0].created_at;
    expect(completedAt.getTime() - secondEnd).toBeLessThan(INTERVAL_MS + AFTER_MS + SLACK_MS);

    // The lost webhooks arrive at last: nothing changes.
    for (const d of [...lost('call.hangup', first.carrier_ref), ...lost('call.hangup', second.carrier_ref)]) {
      expect(await sim.deliver(d.body)).toBe(200);
    }
    await eventually(
      async () => (await count(db.pool, 'SELECT * FROM carrier_events WHERE processed_at IS NULL')) === 0,
    );
    expect(await events(callId, 'call.completed')).toBe(1);
    expect(await events(callId, 'call.answered')).toBe(1);
    expect((await db.pool.query(`SELECT quantity FROM usage_records WHERE source_id = $1`, [callId])).rows).toEqual([
      { quantity: Math.ceil(call.duration_seconds / 60) },
    ]);
    expect(await legs(callId)).toHaveLength(2);
    expect(dialsTo(TALKS_LOST)).toHaveLength(1);
  });

  it('a call the carrier says is alive is asked again every interval and left alone until it ends', async () => {
    const placed = await acme.post('/v1/calls', { from: OUR, to: [TALKS_LONG], ring_timeout_secs: 5 });
    const callId: string = placed.json.id;
    const call = await eventually(async () => {
      const c = (await acme.get(`/v1/calls/${callId}`)).json;
      return c.status === 'completed' && c;
    }, 30_000);
    const [leg] = await legs(callId);
    const lookups = sim.requests.filter((r) => r.method === 'GET' && r.path === `/v2/calls/${leg.carrier_ref}`);
    // Answered, then 7 s of talk: asked after the bound, then about once an interval.
    expect(lookups.length).toBeGreaterThanOrEqual(2);
    expect(lookups.length).toBeLessThanOrEqual(Math.ceil(7000 / INTERVAL_MS) + 1);
    expect(leg.reconciled).toEqual([]);
    expect(call.duration_seconds).toBe(7);
  });
});

describe('a lost terminal receipt', () => {
  it('is learned from the carrier’s record of the message, once, and marked as reconciled; the receipt arriving later is refused', async () => {
    const res = await acme.post('/v1/messages', { from: OUR, to: RECEIPT_LOST, body: 'where did it go?' });
    const id: string = res.json.id;
    const m = await eventually(async () => {
      const got = (await acme.get(`/v1/messages/${id}`)).json;
      return got.status === 'delivered' && got;
    }, 30_000);
    const history = (await acme.get(`/v1/messages/${id}/status_history`)).json.data as {
      source: string;
      effect: string;
      status: string;
    }[];
    expect(history.filter((h) => h.effect === 'applied' && h.status === 'delivered')).toEqual([
      expect.objectContaining({ source: 'reconciliation' }),
    ]);
    const receipt = sim.dropped.find(
      (d) => d.eventType === 'message.finalized' && JSON.parse(d.body).data.payload.id === m.carrier_message_id,
    )!;
    expect(await sim.deliver(receipt.body)).toBe(200);
    await eventually(
      async () => (await count(db.pool, 'SELECT * FROM carrier_events WHERE processed_at IS NULL')) === 0,
    );
    expect(await events(id, 'message.delivered')).toBe(1);
    const after = (await acme.get(`/v1/messages/${id}/status_history`)).json.data as {
      source: string;
      effect: string;
    }[];
    expect(after.at(-1)).toMatchObject({ source: 'carrier', effect: 'refused' });
  });
});

describe('lost recording webhooks', () => {
  const recordingLists = () => sim.requests.filter((r) => r.method === 'GET' && r.path.startsWith('/v2/recordings?'));
  const recordedCall = async (to: string) => {
    const placed = await acme.post('/v1/calls', { from: OUR, to: [to], ring_timeout_secs: 5, record: true });
    expect(placed.status, JSON.stringify(placed.json)).toBe(201);
    const callId: string = placed.json.id;
    await eventually(async () => (await acme.get(`/v1/calls/${callId}`)).json.status === 'completed', 30_000);
    return callId;
  };

  it('a call.recording.saved lost for good: the recording is learned from the carrier’s list and stored, announced and billed once; the webhook arriving at last changes nothing', async () => {
    const callId = await recordedCall(RECORDING_LOST);
    const [leg] = await legs(callId);
    const recording = await eventually(async () => {
      const [r] = (await acme.get(`/v1/calls/${callId}/recordings`)).json.data as any[];
      return r?.audio_status === 'stored' && r;
    }, 30_000);
    const [webhook] = lost('call.recording.saved', leg.carrier_ref);
    expect(webhook).toBeDefined();
    const told = JSON.parse(webhook!.body).data.payload;
    // The carrier's recording, by its id and its times, not ours.
    const row = (await db.pool.query('SELECT * FROM recordings WHERE id = $1', [recording.id])).rows[0];
    expect(row.carrier_recording_id).toBe(told.recording_id);
    expect(row.started_at.toISOString()).toBe(new Date(told.recording_started_at).toISOString());
    expect(row.ended_at.toISOString()).toBe(new Date(told.recording_ended_at).toISOString());
    expect(
      await count(db.pool, 'SELECT * FROM carrier_events WHERE carrier_event_id = $1', [
        `reconcile:${told.recording_id}:saved`,
      ]),
    ).toBe(1);
    expect(recordingLists().length).toBeGreaterThanOrEqual(1);

    expect(await sim.deliver(webhook!.body)).toBe(200);
    await eventually(
      async () => (await count(db.pool, 'SELECT * FROM carrier_events WHERE processed_at IS NULL')) === 0,
    );
    expect(await count(db.pool, 'SELECT * FROM recordings WHERE call_id = $1', [callId])).toBe(1);
    expect(await events(recording.id, 'call.recording.saved')).toBe(1);
    expect(
      (
        await db.pool.query(`SELECT quantity FROM usage_records WHERE kind = 'recording_minute' AND source_id = $1`, [
          recording.id,
        ])
      ).rows,
    ).toEqual([{ quantity: Math.ceil(recording.duration_seconds / 60) }]);
    // Settled: nobody asks about it any more.
    const asked = recordingLists().length;
    await new Promise((r) => setTimeout(r, 2 * AFTER_MS));
    expect(recordingLists().length).toBe(asked);
  });

  it('a recording that failed with its error lost: once the carrier has listed none for ten bounds past the end, the call notes it and announces call.recording.failed once; the error arriving at last changes nothing', async () => {
    const callId = await recordedCall(RECORDING_ERROR_LOST);
    const [leg] = await legs(callId);
    const call = await eventually(async () => {
      const c = (await acme.get(`/v1/calls/${callId}`)).json;
      return c.recording_error && c;
    }, 60_000);
    expect(call.recording_error).toBe('the carrier lists no recording of the call');
    const failedAt = (
      await db.pool.query(
        `SELECT created_at FROM outbound_events WHERE subject_id = $1 AND type = 'call.recording.failed'`,
        [callId],
      )
    ).rows[0].created_at as Date;
    // Not concluded early: only after the carrier had had ten bounds to save it.
    expect(failedAt.getTime() - Date.parse(call.ended_at)).toBeGreaterThanOrEqual(10 * AFTER_MS);
    const [error] = lost('call.recording.error', leg.carrier_ref);
    expect(error).toBeDefined();
    expect(await sim.deliver(error!.body)).toBe(200);
    await eventually(
      async () => (await count(db.pool, 'SELECT * FROM carrier_events WHERE processed_at IS NULL')) === 0,
    );
    expect(await events(callId, 'call.recording.failed')).toBe(1);
    expect(await count(db.pool, 'SELECT * FROM recordings WHERE call_id = $1', [callId])).toBe(0);
    expect(
      await count(db.pool, `SELECT * FROM usage_records WHERE kind = 'recording_minute' AND source_id LIKE 'rec%'`),
    ).toBe(1); // the first test's recording only
  });
});

describe('handset reconcile', () => {
  it('--dry-run lists what it would ask, and why, and asks the carrier nothing', async () => {
    const other = await createTestDatabase();
    try {
      const api = await startTestPlatform({ databaseUrl: other.url, roles: ['api'], env: sim.carrierEnv() });
      try {
        const client = await createAccount(other.pool, api.apiUrl!, 'Dry');
        expect((await client.post('/v1/phone_numbers', { number: OUR })).status).toBe(201);
        const callId = (await client.post('/v1/calls', { from: OUR, to: [NO_ANSWER_LOST], ring_timeout_secs: 5 })).json
          .id;
        // A leg dialed an hour ago that never heard back.
        await other.pool.query(
          `UPDATE call_legs SET status = 'ringing', carrier_ref = 'v3:long-gone', dialed_at = now() - interval '1 hour' WHERE call_id = $1`,
          [callId],
        );
        const env = { DATABASE_URL: other.url, ...sim.carrierEnv(), LOG_LEVEL: 'warn' };
        const before = sim.requests.length;
        const dry = await runHandset(['reconcile', '--dry-run'], env);
        expect(dry.code).toBe(0);
        expect(dry.output).toMatch(/would ask the carrier about 1:/);
        expect(dry.output).toMatch(/ringing since .*, past its 5 s ring timeout/);
        expect(sim.requests.length).toBe(before);

        // Asked for real: the carrier no longer knows the leg, so it ended by its ring timeout.
        const real = await runHandset(['reconcile', '--json'], env);
        expect(real.code).toBe(0);
        expect(JSON.parse(real.output.trim().split('\n').at(-1)!)).toMatchObject({ applied: 1 });
        expect(sim.requests.filter((r) => r.path === '/v2/calls/v3:long-gone')).toHaveLength(1);
        expect(
          await count(
            other.pool,
            `SELECT * FROM carrier_events WHERE carrier_event_id = 'reconcile:v3:long-gone:hangup'`,
          ),
        ).toBe(1);
      } finally {
        await api.stop();
      }
    } finally {
      await other.drop();
    }
  });
});
