// `handset audit` against real traffic: the whole platform runs against the
// simulator (which duplicates, re-sends under new ids and contradicts itself)
// through messages, MMS, a canceled schedule, inbound SMS, sequential-ring calls
// (answered, missed, still ringing), an inbound call, and endpoints that succeed,
// fail (deliveries pending a retry), are disabled, subscribe to one type, or are
// deleted. That database must pass every check. Then each kind of violation is
// planted, the way the bug it stands for would have written it, in a clone of
// its own, and exactly the check for that rule must report it, naming the ids.

import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, inject } from 'vitest';
import { formatAuditReport, runAudit, type AuditReport } from '../../src/audit/audit.js';
import { runAuditCommand } from '../../src/audit/cli.js';
import { bill } from '../../src/billing/usage.sql.js';
import { createPool } from '../../src/db/pool.js';
import { withTx } from '../../src/db/tx.js';
import { jobKeys } from '../../src/jobs/keys.js';
import { messageResource } from '../../src/messages/messages.js';
import { historyRecord, type MessageRow } from '../../src/messages/messages.sql.js';
import { emit } from '../../src/outbox/outbox.js';
import type { Platform } from '../../src/platform.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { createLogger } from '../../src/telemetry/log.js';
import { createAccount, type ApiClient } from '../support/api.js';
import { count, createTestDatabase, eventually } from '../support/db.js';
import { withDatabase } from '../../src/db/databases.js';
import { startTestPlatform } from '../support/platform.js';
import { startReceiver, type Receiver } from '../support/receiver.js';

const OUR_NUMBER = '+13125550301';
const INBOUND_NUMBER = '+13125550302';
// the simulator's magic numbers
const DELIVERS = '+15555550100'; // SMS delivered; a call answers after 1 s and talks 3 s
const FAILS = '+15555550101'; // delivery_failed 40008
const REJECTED = '+15555550103'; // refused at send
const SENT_ONLY = '+15555550105'; // message.sent, never finalized
const NEVER_ANSWERS = '+15555550110'; // hangup `timeout`
const BUSY = '+15555550111'; // hangup `user_busy`
const MANUAL = '+15555550115'; // rings until told otherwise
const TALKS_LONG = '+15555550130'; // answers, talks 500 simulated seconds: a call long enough to record

const log = createLogger('silent');
let source: { name: string; url: string };
let clean: AuditReport;
const traffic = { answeredCall: '', missedCall: '', ringingCall: '', scheduled: '', duplicates: 0, resends: 0 };

// ─── databases ────────────────────────────────────────────────────────────────

async function admin<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: inject('adminUrl') });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

interface Clone {
  url: string;
  pool: pg.Pool;
  drop(): Promise<void>;
}

/** A copy of the traffic database (CREATE DATABASE … TEMPLATE), for one plant. */
async function cloneTraffic(): Promise<Clone> {
  const name = `${source.name}_c${randomUUID().slice(0, 8)}`;
  await admin((c) => c.query(`CREATE DATABASE ${name} TEMPLATE ${source.name}`));
  const url = withDatabase(inject('adminUrl'), name);
  const pool = createPool(url, { max: 4, applicationName: 'handset-audit-test' });
  return {
    url,
    pool,
    async drop() {
      await pool.end();
      await admin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
    },
  };
}

async function withClone<T>(fn: (clone: Clone) => Promise<T>): Promise<T> {
  const clone = await cloneTraffic();
  try {
    return await fn(clone);
  } finally {
    await clone.drop();
  }
}

// ─── real traffic ─────────────────────────────────────────────────────────────

beforeAll(async () => {
  const db = await createTestDatabase();
  source = { name: db.name, url: db.url };
  const sim: Simulator = await startSimulator({
    webhookUrl: null,
    timeScale: 0.01,
    seed: 'audit',
    connectionId: 'conn-audit',
    behaviour: { duplicateRate: 0.3, resendNewIdRate: 0.2, contradictionRate: 1 },
  });
  const platform: Platform = await startTestPlatform({
    databaseUrl: db.url,
    roles: ['ingest', 'api', 'worker'],
    env: {
      ...sim.carrierEnv(),
      // the failing endpoint's deliveries stay pending, their retries an hour away
      HANDSET_DELIVERY_RETRY_SCHEDULE: '1h',
    },
  });
  sim.setWebhookUrl(`${platform.ingestUrl}/webhooks/telnyx`);
  const ok = await startReceiver();
  const failing = await startReceiver();
  failing.answer = () => ({ status: 500 });
  const receivers: Receiver[] = [ok, failing];
  try {
    const acme: ApiClient = await createAccount(db.pool, platform.apiUrl!, 'Acme');
    expect((await acme.post('/v1/phone_numbers', { number: OUR_NUMBER })).status).toBe(201);
    expect(
      (await acme.post('/v1/phone_numbers', { number: INBOUND_NUMBER, inbound_ring: [DELIVERS], ring_timeout_secs: 5 }))
        .status,
    ).toBe(201);

    const endpoint = async (body: object) => {
      const res = await acme.post('/v1/webhook_endpoints', body);
      expect(res.status).toBe(201);
      return res.json.id as string;
    };
    await endpoint({ url: ok.url });
    await endpoint({ url: ok.url, event_types: ['message.delivered'] });
    await endpoint({ url: failing.url });
    const disabled = await endpoint({ url: ok.url });
    expect((await acme.patch(`/v1/webhook_endpoints/${disabled}`, { enabled: false })).status).toBe(200);
    const deleted = await endpoint({ url: ok.url });
    expect((await acme.delete(`/v1/webhook_endpoints/${deleted}`)).status).toBeLessThan(300);

    const send = async (to: string, extra: object = {}) => {
      const res = await acme.post('/v1/messages', { from: OUR_NUMBER, to, body: 'Hello from the audit', ...extra });
      expect(res.status).toBe(201);
      return res.json.id as string;
    };
    for (const to of [DELIVERS, DELIVERS, DELIVERS, DELIVERS, FAILS, FAILS, REJECTED, SENT_ONLY]) await send(to);
    await send(DELIVERS, { body: 'Long enough to need more than one segment. '.repeat(5) });
    await send(DELIVERS, { media_urls: ['https://example.com/cat.png'] });
    const scheduled = await send(DELIVERS, { send_at: new Date(Date.now() + 3_600_000).toISOString() });
    expect((await acme.post(`/v1/messages/${scheduled}/cancel`)).status).toBe(200);
    traffic.scheduled = await send(DELIVERS, { send_at: new Date(Date.now() + 3_600_000).toISOString() });
    sim.injectInboundSms({ from: '+14155550123', to: OUR_NUMBER, text: 'Inbound, once' });
    sim.injectInboundSms({ from: '+14155550124', to: OUR_NUMBER, text: 'Inbound 👋 with emoji' });
    sim.injectInboundSms({ from: '+14155550125', to: OUR_NUMBER, text: 'And a third' });
    // One opts out and back in, one stays opted out (and a send to them is refused).
    sim.injectInboundSms({ from: '+14155550126', to: OUR_NUMBER, text: 'STOP' });
    sim.injectInboundSms({ from: '+14155550127', to: OUR_NUMBER, text: 'stop' });
    await eventually(async () => (await count(db.pool, 'SELECT * FROM opt_outs')) === 2);
    sim.injectInboundSms({ from: '+14155550126', to: OUR_NUMBER, text: 'START' });
    const refused = await acme.post('/v1/messages', { from: OUR_NUMBER, to: '+14155550127', body: 'x' });
    expect(refused.json.code).toBe('recipient_opted_out');

    const call = async (to: string[]) => {
      const res = await acme.post('/v1/calls', { from: OUR_NUMBER, to, ring_timeout_secs: 5 });
      expect(res.status).toBe(201);
      return res.json.id as string;
    };
    traffic.answeredCall = await call([NEVER_ANSWERS, DELIVERS, BUSY]); // answered at position 1; 2 never claimed
    await call([DELIVERS]);
    await call([BUSY, DELIVERS]);
    traffic.missedCall = await call([BUSY, NEVER_ANSWERS]);
    traffic.ringingCall = await call([MANUAL]);
    sim.injectInboundCall({ from: '+14155550999', to: INBOUND_NUMBER });
    // Talks long enough (at this time scale) for its recording to start: 5 s.
    sim.setPersona(TALKS_LONG, { call: { answerAfterMs: 1000, talkMs: 500_000 } });
    const recorded = await acme.post('/v1/calls', {
      from: OUR_NUMBER,
      to: [TALKS_LONG],
      ring_timeout_secs: 5,
      record: true,
      transcribe: true,
    });
    expect(recorded.status).toBe(201);

    // Quiet: the carrier has nothing left to say, every event is processed,
    // every call but the manual one is over, and no job is due.
    const quiet = () =>
      eventually(
        async () => {
          await sim.idle();
          const { rows } = await db.pool.query<{ busy: number }>(
            `SELECT (SELECT count(*) FROM carrier_events WHERE processed_at IS NULL)
                + (SELECT count(*) FROM messages WHERE status = 'queued')
                + (SELECT count(*) FROM calls WHERE ended_at IS NULL AND id <> $1)
                + (SELECT count(*) FROM call_legs WHERE call_id = $1 AND status <> 'ringing')
                + (SELECT count(*) FROM calls WHERE direction = 'inbound' AND status <> 'completed')
                + (SELECT count(*) FROM calls c WHERE c.record AND c.status = 'completed'
                      AND NOT EXISTS (SELECT 1 FROM recordings r WHERE r.call_id = c.id
                                       AND r.audio_status <> 'pending' AND r.transcription_status <> 'pending'))
                + (SELECT count(*) FROM graphile_worker.jobs WHERE run_at <= now() AND attempts < max_attempts AND task_identifier <> 'reconcile') AS busy`,
            [traffic.ringingCall],
          );
          return (
            rows[0]!.busy === 0 && (await count(db.pool, 'SELECT * FROM calls WHERE direction = $1', ['inbound'])) === 1
          );
        },
        90_000,
        100,
      );
    await quiet();
    // Every delivered receipt above was contradicted, and which of the two a
    // worker applies first is a race (both are stored before either runs), so
    // they may all have ended failed. One more message, told once, is delivered
    // for certain: the audit then sees both terminal outcomes.
    sim.setBehaviour({ contradictionRate: 0 });
    await send(DELIVERS);
    await quiet();

    clean = await runAudit(db.pool, { graceSeconds: 0 });
    traffic.duplicates = sim.counts.duplicates;
    traffic.resends = sim.counts.resends;
  } finally {
    await platform.stop();
    await sim.close();
    for (const r of receivers) await r.close();
    await db.pool.end();
  }
  // nothing may stay connected to a template
  await admin((c) =>
    c.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()', [
      source.name,
    ]),
  );
}, 180_000);

afterAll(async () => {
  if (source) await admin((c) => c.query(`DROP DATABASE IF EXISTS ${source.name} WITH (FORCE)`));
});

// ─── helpers ──────────────────────────────────────────────────────────────────

/** Exactly the check `key` is broken, and its sample names every one of `ids`. */
function expectOnly(report: AuditReport, key: string, ids: string[]) {
  expect(report.ok).toBe(false);
  const broken = report.checks.filter((c) => c.violations > 0);
  expect(broken.map((c) => c.key)).toEqual([key]);
  expect(broken[0]!.violations).toBe(ids.length);
  expect(broken[0]!.sample).toEqual([...ids].sort());
}

async function one<T>(db: pg.Pool, sql: string, values: unknown[] = []): Promise<T> {
  const { rows } = await db.query(sql, values);
  if (!rows[0]) throw new Error(`no row for: ${sql}`);
  return rows[0] as T;
}

const messageWhere = (db: pg.Pool, where: string) =>
  one<MessageRow>(db, `SELECT * FROM messages WHERE ${where} ORDER BY id LIMIT 1`);

// ─── the clean database ───────────────────────────────────────────────────────

describe('a database with real traffic', () => {
  it('holds every invariant, and every check had something to examine', () => {
    expect(formatAuditReport(clean)).toContain('✔ all 29 checks hold');
    expect(clean.ok).toBe(true);
    expect(clean.checks).toHaveLength(29);
    for (const c of clean.checks) {
      expect({ key: c.key, violations: c.violations }).toEqual({ key: c.key, violations: 0 });
      expect({ key: c.key, checked: c.checked > 0 }).toEqual({ key: c.key, checked: true });
    }
    expect(new Set(clean.checks.map((c) => c.invariant))).toEqual(new Set([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]));
  });

  it('the traffic covered what the checks are about', async () => {
    await withClone(async ({ pool }) => {
      const { rows } = await pool.query(
        `SELECT (SELECT array_agg(DISTINCT status ORDER BY status) FROM messages) AS message_statuses,
                (SELECT array_agg(DISTINCT kind ORDER BY kind) FROM usage_records) AS bill_kinds,
                (SELECT array_agg(DISTINCT status ORDER BY status) FROM calls) AS call_statuses,
                (SELECT array_agg(DISTINCT status ORDER BY status) FROM webhook_deliveries) AS delivery_statuses,
                (SELECT count(*) FROM message_status_history WHERE effect = 'refused') > 0 AS receipts_refused`,
      );
      expect(rows[0]).toEqual({
        message_statuses: ['canceled', 'delivered', 'failed', 'received', 'scheduled', 'sent'],
        bill_kinds: [
          'call_minute',
          'mms_outbound',
          'recording_minute',
          'sms_segment_inbound',
          'sms_segment_outbound',
          'transcription_minute',
        ],
        call_statuses: ['completed', 'missed', 'ringing'],
        delivery_statuses: ['pending', 'skipped', 'succeeded'],
        receipts_refused: true,
      });
      // the carrier repeated itself, under the same event id and under new ones
      expect(traffic.duplicates).toBeGreaterThan(0);
      expect(traffic.resends).toBeGreaterThan(0);
    });
  });
});

// ─── planted violations ───────────────────────────────────────────────────────

interface Plant {
  /** The violation, as a bug would have left it. */
  what: string;
  check: string;
  /** Plants it and returns the ids the check must name. */
  plant(db: pg.Pool): Promise<string[]>;
}

/** The job under `key` is gone, as if lost. */
const removeJob = (db: pg.Pool, key: string) => db.query('SELECT graphile_worker.remove_job($1)', [key]);
/** The job under `key` has used up its attempts and is not running: it never runs again. */
const exhaustJob = (db: pg.Pool, key: string) =>
  db.query('UPDATE graphile_worker._private_jobs SET attempts = max_attempts WHERE key = $1', [key]);

const plants: Plant[] = [
  {
    what: 'a carrier event stored twice under one carrier event id',
    check: 'carrier_events.stored_once',
    async plant(db) {
      await db.query('ALTER TABLE carrier_events DROP CONSTRAINT carrier_events_carrier_carrier_event_id_key');
      const ev = await one<{ id: string }>(db, 'SELECT id FROM carrier_events ORDER BY id LIMIT 1');
      const copy = await one<{ id: string }>(
        db,
        `INSERT INTO carrier_events (carrier, carrier_event_id, event_type, payload, processed_at)
         SELECT carrier, carrier_event_id, event_type, payload, now() FROM carrier_events WHERE id = $1 RETURNING id`,
        [ev.id],
      );
      return [ev.id, copy.id];
    },
  },
  {
    what: 'a carrier event never processed, with no error, older than the grace period',
    check: 'carrier_events.processed',
    async plant(db) {
      const old = await one<{ id: string }>(
        db,
        `INSERT INTO carrier_events (carrier_event_id, event_type, payload, created_at)
         VALUES ($1, 'message.finalized', '{}', now() - interval '2 minutes') RETURNING id`,
        [randomUUID()],
      );
      // one still in flight (younger than the grace period) is not a violation
      await db.query(
        `INSERT INTO carrier_events (carrier_event_id, event_type, payload) VALUES ($1, 'message.finalized', '{}')`,
        [randomUUID()],
      );
      return [old.id];
    },
  },
  {
    what: 'two messages for one carrier message id (an inbound SMS inserted twice, each billed and announced)',
    check: 'messages.one_per_carrier_id',
    async plant(db) {
      await db.query('ALTER TABLE messages DROP CONSTRAINT messages_carrier_carrier_message_id_key');
      const m = await messageWhere(db, `direction = 'inbound'`);
      const copy = await withTx(db, async (tx) => {
        const { rows } = await tx.query<MessageRow>(
          `INSERT INTO messages (account_id, tenant_id, direction, from_number, to_number, body, media_urls, status, encoding,
                                 segments, carrier, carrier_message_id, created_at, completed_at)
           SELECT account_id, tenant_id, direction, from_number, to_number, body, media_urls, status, encoding,
                  segments, carrier, carrier_message_id, now(), now()
             FROM messages WHERE id = $1 RETURNING *`,
          [m.id],
        );
        const c = rows[0]!;
        await bill(tx, {
          accountId: c.account_id,
          tenantId: c.tenant_id,
          kind: 'sms_segment_inbound',
          quantity: c.segments,
          sourceId: c.id,
          occurredAt: c.created_at,
        });
        await historyRecord(tx, {
          messageId: c.id,
          source: 'carrier',
          status: 'received',
          effect: 'applied',
          occurredAt: c.created_at,
        });
        await emit(tx, {
          accountId: c.account_id,
          tenantId: c.tenant_id,
          type: 'message.received',
          subjectId: c.id,
          data: messageResource(c),
          occurredAt: c.created_at,
        });
        return c;
      });
      return [m.id, copy.id];
    },
  },
  {
    what: 'two terminal events for one message (delivered, then a contradicting failure announced)',
    check: 'messages.terminal_once',
    async plant(db) {
      const m = await messageWhere(db, `status = 'delivered'`);
      await withTx(db, (tx) =>
        emit(tx, {
          accountId: m.account_id,
          tenantId: m.tenant_id,
          type: 'message.failed',
          subjectId: m.id,
          data: messageResource({ ...m, status: 'failed', sequence: m.sequence + 1 }),
          occurredAt: new Date(),
        }),
      );
      return [m.id];
    },
  },
  {
    what: 'a dispatched message billed twice',
    check: 'messages.billed_once',
    async plant(db) {
      const m = await messageWhere(db, `direction = 'outbound' AND sent_at IS NOT NULL`);
      await withTx(db, (tx) =>
        bill(tx, {
          accountId: m.account_id,
          tenantId: m.tenant_id,
          kind: 'sms_segment_outbound',
          quantity: m.segments,
          sourceId: m.id,
          occurredAt: new Date(),
        }),
      );
      return [m.id];
    },
  },
  {
    what: 'a dispatched message never billed',
    check: 'messages.billed_once',
    async plant(db) {
      const m = await messageWhere(db, `direction = 'outbound' AND sent_at IS NOT NULL`);
      await db.query('DELETE FROM usage_records WHERE source_id = $1', [m.id]);
      return [m.id];
    },
  },
  {
    what: 'a completed call whose minutes were never billed',
    check: 'calls.billed_once',
    async plant(db) {
      await db.query('DELETE FROM usage_records WHERE source_id = $1', [traffic.answeredCall]);
      return [traffic.answeredCall];
    },
  },
  {
    what: 'a missed call billed a minute',
    check: 'calls.billed_once',
    async plant(db) {
      const c = await one<{ account_id: string }>(db, 'SELECT account_id FROM calls WHERE id = $1', [
        traffic.missedCall,
      ]);
      await withTx(db, (tx) =>
        bill(tx, {
          accountId: c.account_id,
          tenantId: null,
          kind: 'call_minute',
          quantity: 1,
          sourceId: traffic.missedCall,
          occurredAt: new Date(),
        }),
      );
      return [traffic.missedCall];
    },
  },
  {
    what: 'a leg claimed after the call was answered (a ring cursor CAS without its status guard)',
    check: 'legs.claimed_while_ringing',
    async plant(db) {
      const leg = await withTx(db, async (tx) => {
        const { rows } = await tx.query<{ next: number; to: string }>(
          `UPDATE calls SET ring_plan = jsonb_set(ring_plan, '{next}', to_jsonb((ring_plan->>'next')::int + 1))
            WHERE id = $1 AND status = 'completed'
            RETURNING (ring_plan->>'next')::int - 1 AS next, ring_plan->'targets'->>((ring_plan->>'next')::int - 1) AS to`,
          [traffic.answeredCall],
        );
        const { next, to } = rows[0]!;
        expect(next).toBe(2);
        const ins = await tx.query<{ id: string }>(
          `INSERT INTO call_legs (call_id, position, to_number, status) VALUES ($1, $2, $3, 'dialing') RETURNING id`,
          [traffic.answeredCall, next, to],
        );
        return ins.rows[0]!.id;
      });
      return [leg];
    },
  },
  {
    what: 'a leg claimed after the answer, on a call whose events are gone (judged by the clock)',
    check: 'legs.claimed_while_ringing',
    async plant(db) {
      const events = `SELECT id FROM outbound_events WHERE subject_id = $1 AND type IN ('call.answered', 'call.completed')`;
      await db.query(
        `DELETE FROM webhook_attempts WHERE delivery_id IN (SELECT id FROM webhook_deliveries WHERE event_id IN (${events}))`,
        [traffic.answeredCall],
      );
      await db.query(`DELETE FROM webhook_deliveries WHERE event_id IN (${events})`, [traffic.answeredCall]);
      await db.query(`DELETE FROM outbound_events WHERE id IN (${events})`, [traffic.answeredCall]);
      const leg = await one<{ id: string }>(
        db,
        `WITH claim AS (
           UPDATE calls SET ring_plan = jsonb_set(ring_plan, '{next}', '3') WHERE id = $1 RETURNING ring_plan->'targets'->>2 AS target
         )
         INSERT INTO call_legs (call_id, position, to_number, status) SELECT $1, 2, target, 'dialing' FROM claim RETURNING id`,
        [traffic.answeredCall],
      );
      return [leg.id];
    },
  },
  {
    what: 'two legs at one ring position',
    check: 'legs.one_per_position',
    async plant(db) {
      await db.query('ALTER TABLE call_legs DROP CONSTRAINT call_legs_call_id_position_key');
      const first = await one<{ id: string }>(db, 'SELECT id FROM call_legs WHERE call_id = $1 AND position = 0', [
        traffic.ringingCall,
      ]);
      const second = await one<{ id: string }>(
        db,
        `INSERT INTO call_legs (call_id, position, to_number, status) VALUES ($1, 0, $2, 'dialing') RETURNING id`,
        [traffic.ringingCall, MANUAL],
      );
      return [first.id, second.id];
    },
  },
  {
    what: 'a pending delivery whose job is gone (lost)',
    check: 'deliveries.pending_has_job',
    async plant(db) {
      const d = await one<{ id: string }>(
        db,
        `SELECT id FROM webhook_deliveries WHERE status = 'pending' AND relay_after IS NULL ORDER BY id LIMIT 1`,
      );
      await removeJob(db, jobKeys.delivery(d.id));
      return [d.id];
    },
  },
  {
    what: 'a pending delivery whose job has used up its attempts',
    check: 'deliveries.pending_has_job',
    async plant(db) {
      const d = await one<{ id: string }>(
        db,
        `SELECT id FROM webhook_deliveries WHERE status = 'pending' AND relay_after IS NULL ORDER BY id LIMIT 1`,
      );
      await exhaustJob(db, jobKeys.delivery(d.id));
      return [d.id];
    },
  },
  {
    what: 'a scheduled message past its send_at whose dispatch job is gone (it would never be sent)',
    check: 'messages.waiting_has_job',
    async plant(db) {
      await removeJob(db, jobKeys.dispatch(traffic.scheduled));
      await db.query(`UPDATE messages SET send_at = now() - interval '1 hour' WHERE id = $1`, [traffic.scheduled]);
      return [traffic.scheduled];
    },
  },
  {
    what: 'a waiting message past its send_at whose dispatch job has used up its attempts',
    check: 'messages.waiting_has_job',
    async plant(db) {
      // Its job (a batched dispatcher hands a message to one to retry it), out of attempts.
      await db.query(
        `SELECT graphile_worker.add_job('message.dispatch', json_build_object('messageId', $1::text),
                                        job_key := $2, run_at := now() + interval '1 day')`,
        [traffic.scheduled, jobKeys.dispatch(traffic.scheduled)],
      );
      await exhaustJob(db, jobKeys.dispatch(traffic.scheduled));
      await db.query(`UPDATE messages SET send_at = now() - interval '1 hour' WHERE id = $1`, [traffic.scheduled]);
      return [traffic.scheduled];
    },
  },
  {
    what: 'a queued message whose batched dispatcher died: its lease ran out and no job took it over',
    check: 'messages.waiting_has_job',
    async plant(db) {
      const m = await one<{ id: string }>(
        db,
        `UPDATE messages SET status = 'queued', dispatch_lease_until = now() - interval '1 hour'
          WHERE id = $1 RETURNING id`,
        [traffic.scheduled],
      );
      await removeJob(db, jobKeys.dispatch(m.id));
      return [m.id];
    },
  },
  {
    what: 'a succeeded delivery the relay would still take',
    check: 'deliveries.relayed_pending',
    async plant(db) {
      const d = await one<{ id: string }>(
        db,
        `UPDATE webhook_deliveries SET relay_after = now()
          WHERE id = (SELECT id FROM webhook_deliveries WHERE status = 'succeeded' ORDER BY id LIMIT 1)
          RETURNING id`,
      );
      return [d.id];
    },
  },
  {
    what: 'an event with no delivery for an endpoint subscribed at the time',
    check: 'events.delivered_to_subscribers',
    async plant(db) {
      const d = await one<{ id: string; event_id: string }>(
        db,
        `SELECT id, event_id FROM webhook_deliveries WHERE status = 'succeeded' ORDER BY id LIMIT 1`,
      );
      await db.query('DELETE FROM webhook_attempts WHERE delivery_id = $1', [d.id]);
      await db.query('DELETE FROM webhook_deliveries WHERE id = $1', [d.id]);
      return [d.event_id];
    },
  },
  {
    what: 'a leg ringing an hour past its ring timeout that nobody asked the carrier about',
    check: 'legs.not_waiting_forever',
    async plant(db) {
      const leg = await one<{ id: string }>(db, 'SELECT id FROM call_legs WHERE call_id = $1 AND ended_at IS NULL', [
        traffic.ringingCall,
      ]);
      await db.query(`UPDATE call_legs SET dialed_at = now() - interval '1 hour', checked_at = NULL WHERE id = $1`, [
        leg.id,
      ]);
      return [leg.id];
    },
  },
  {
    what: 'a call not ended with no leg left up (nothing will ever end it)',
    check: 'calls.not_waiting_forever',
    async plant(db) {
      await db.query(`UPDATE call_legs SET ended_at = now(), status = 'no_answer' WHERE call_id = $1`, [
        traffic.ringingCall,
      ]);
      return [traffic.ringingCall];
    },
  },
  {
    what: 'a message sent two hours ago, never finalized, never looked up',
    check: 'messages.not_waiting_forever',
    async plant(db) {
      const m = await messageWhere(db, `status = 'sent'`);
      await db.query(`UPDATE messages SET sent_at = now() - interval '2 hours', checked_at = NULL WHERE id = $1`, [
        m.id,
      ]);
      return [m.id];
    },
  },
  {
    what: 'a completed call timed from our clock, not its leg’s answer',
    check: 'calls.duration_from_carrier',
    async plant(db) {
      await db.query(
        `UPDATE calls SET answered_at = answered_at - interval '10 seconds', duration_seconds = duration_seconds + 10 WHERE id = $1`,
        [traffic.answeredCall],
      );
      return [traffic.answeredCall];
    },
  },
  {
    what: 'a receipt about a carrier message id no message has (a second send)',
    check: 'messages.sent_once',
    async plant(db) {
      const ev = await one<{ id: string }>(
        db,
        `INSERT INTO carrier_events (carrier_event_id, event_type, subject, payload, processed_at, error, created_at)
         VALUES ($1, 'message.finalized', $2, '{}', now(), 'no message has telnyx id', now() - interval '2 minutes') RETURNING id`,
        [randomUUID(), randomUUID()],
      );
      return [ev.id];
    },
  },
  {
    what: 'a message two carriers took (an acceptance recorded at a carrier it does not name)',
    check: 'messages.one_carrier',
    async plant(db) {
      const m = await messageWhere(db, `direction = 'outbound' AND carrier_message_id IS NOT NULL`);
      await db.query(
        `INSERT INTO message_sends (message_id, carrier, from_number, outcome, carrier_message_id, started_at)
         VALUES ($1, 'twilio', $2, 'accepted', $3, now())`,
        [m.id, m.from_number, `SM${'0'.repeat(32)}`],
      );
      return [m.id];
    },
  },
  {
    what: 'an event about a message whose sequence is not above the previous event’s (a second event for one transition)',
    check: 'events.sequence_increases',
    async plant(db) {
      const ev = await one<{ id: string }>(
        db,
        `SELECT e.id FROM outbound_events e
          WHERE e.type = 'message.delivered'
            AND EXISTS (SELECT 1 FROM outbound_events s WHERE s.subject_id = e.subject_id AND s.type = 'message.sent')
          ORDER BY e.id LIMIT 1`,
      );
      await db.query(`UPDATE outbound_events SET data = jsonb_set(data, '{sequence}', to_jsonb(1)) WHERE id = $1`, [
        ev.id,
      ]);
      return [ev.id];
    },
  },
  {
    what: 'a recording stored twice under one carrier recording id (the copy billed, never announced)',
    check: 'recordings.stored_once',
    async plant(db) {
      await db.query('ALTER TABLE recordings DROP CONSTRAINT recordings_carrier_carrier_recording_id_key');
      const r = await one<{ id: string }>(db, 'SELECT id FROM recordings ORDER BY id LIMIT 1');
      const copy = await one<{ id: string }>(
        db,
        `INSERT INTO recordings (account_id, tenant_id, call_id, carrier, carrier_recording_id, carrier_ref, started_at,
                                 ended_at, duration_seconds)
         SELECT account_id, tenant_id, call_id, carrier, carrier_recording_id, carrier_ref, started_at, ended_at,
                duration_seconds FROM recordings WHERE id = $1 RETURNING id`,
        [r.id],
      );
      await db.query(
        `INSERT INTO usage_records (account_id, tenant_id, kind, quantity, source_id, occurred_at)
         SELECT account_id, tenant_id, kind, quantity, $2, occurred_at FROM usage_records
          WHERE source_id = $1 AND kind = 'recording_minute'`,
        [r.id, copy.id],
      );
      return [r.id, copy.id];
    },
  },
  {
    what: 'a recording whose transcription is completed without a transcript',
    check: 'recordings.transcribed_once',
    async plant(db) {
      const r = await one<{ id: string }>(
        db,
        `UPDATE recordings SET transcript = NULL
          WHERE id = (SELECT id FROM recordings WHERE transcription_status = 'completed' ORDER BY id LIMIT 1)
          RETURNING id`,
      );
      return [r.id];
    },
  },
  {
    what: 'recording minutes billed twice',
    check: 'recordings.billed_once',
    async plant(db) {
      const u = await one<{ source_id: string }>(
        db,
        `INSERT INTO usage_records (account_id, tenant_id, kind, quantity, source_id, occurred_at)
         SELECT account_id, tenant_id, kind, quantity, source_id, occurred_at FROM usage_records
          WHERE kind = 'recording_minute' ORDER BY id LIMIT 1 RETURNING source_id`,
      );
      return [u.source_id];
    },
  },
  {
    what: 'a message handed to the carrier after its recipient opted out (the dispatcher skipped the list)',
    check: 'messages.not_to_opted_out',
    async plant(db) {
      const o = await one<{ number: string; recipient: string; created_at: Date }>(
        db,
        'SELECT number, recipient, created_at FROM opt_outs WHERE deleted_at IS NULL ORDER BY id LIMIT 1',
      );
      const m = await messageWhere(db, `direction = 'outbound' AND dispatched_at IS NOT NULL`);
      await db.query(
        `UPDATE messages SET from_number = $2, to_number = $3, dispatched_at = $4::timestamptz + interval '1 second'
          WHERE id = $1`,
        [m.id, o.number, o.recipient, o.created_at],
      );
      return [m.id];
    },
  },
  {
    what: 'an opt-out that ended without its opt_out.deleted',
    check: 'opt_outs.one_event_per_change',
    async plant(db) {
      const o = await one<{ id: string }>(db, 'SELECT id FROM opt_outs WHERE deleted_at IS NULL ORDER BY id LIMIT 1');
      await db.query('UPDATE opt_outs SET deleted_at = now(), sequence = sequence + 1 WHERE id = $1', [o.id]);
      return [o.id];
    },
  },
  {
    what: 'an opt-out that ended, its end announced as a second opt_out.created',
    check: 'opt_outs.one_event_per_change',
    async plant(db) {
      const e = await one<{ id: string; subject_id: string }>(
        db,
        `SELECT id, subject_id FROM outbound_events WHERE type = 'opt_out.deleted' ORDER BY id LIMIT 1`,
      );
      await db.query(`UPDATE outbound_events SET type = 'opt_out.created' WHERE id = $1`, [e.id]);
      return [e.subject_id];
    },
  },
];

describe('planted violations', () => {
  it.each(plants)('$what: reported by $check', async ({ check, plant }) => {
    await withClone(async ({ pool }) => {
      const ids = await plant(pool);
      expectOnly(await runAudit(pool), check, ids);
    });
  });

  it("runs on a client as it is: inside the caller's transaction, it sees that transaction's writes", async () => {
    await withClone(async ({ pool }) => {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        const m = await one<{ id: string }>(
          pool,
          `SELECT id FROM messages WHERE status = 'delivered' ORDER BY id LIMIT 1`,
        );
        await client.query('DELETE FROM usage_records WHERE source_id = $1', [m.id]);
        expectOnly(await runAudit(client), 'messages.billed_once', [m.id]);
        await client.query('ROLLBACK');
        expect((await runAudit(client)).ok).toBe(true);
      } finally {
        client.release();
      }
    });
  });

  it('the sample is bounded and the report counts the rest', async () => {
    await withClone(async ({ pool }) => {
      await pool.query(
        `INSERT INTO carrier_events (carrier_event_id, event_type, payload, created_at)
         SELECT gen_random_uuid()::text, 'message.finalized', '{}', now() - interval '1 hour' FROM generate_series(1, 5)`,
      );
      const report = await runAudit(pool, { sampleLimit: 2 });
      const check = report.checks.find((c) => c.key === 'carrier_events.processed')!;
      expect(check.violations).toBe(5);
      expect(check.sample).toHaveLength(2);
      expect(formatAuditReport(report)).toMatch(
        /^✘ 1 {2}carrier event processed or its error recorded \(checked \d+ carrier events older than 60 s\): 5 violations: cev_\w+, cev_\w+, … \(3 more\)$/m,
      );
    });
  });
});

// ─── the command ──────────────────────────────────────────────────────────────

describe('handset audit (the command)', () => {
  async function command(args: string[], url: string) {
    let stdout = '';
    let stderr = '';
    const code = await runAuditCommand(args, url, log, {
      stdout: { write: (t: string) => (stdout += t) },
      stderr: { write: (t: string) => (stderr += t) },
    });
    return { code, stdout, stderr };
  }

  it('exits 0 on the clean database, printing one line per check and the summary', async () => {
    await withClone(async ({ url }) => {
      const { code, stdout } = await command([], url);
      expect(code).toBe(0);
      const lines = stdout.trimEnd().split('\n');
      expect(lines).toHaveLength(31);
      // The bounds the traffic's worker ran with (the tests' serve defaults), as it recorded them.
      expect(lines[0]).toMatch(
        /^invariant 7 judged with the bounds recorded by the workers that wrote this database: HANDSET_RECONCILE_INTERVAL 1m, HANDSET_RECONCILE_AFTER 1m, HANDSET_RECONCILE_MESSAGE_AFTER 1h \(in force \S+ to \S+\)$/,
      );
      expect(lines.slice(1, 30).every((l) => /^✔ (\d|1\d) {1,2}.+ \(checked [\d,]+ .+\): ok$/.test(l))).toBe(true);
      expect(lines[30]).toBe('✔ all 29 checks hold');
    });
  });

  it('exits 1 with the offending id on a broken database, in text and in --json', async () => {
    await withClone(async ({ url, pool }) => {
      const m = await messageWhere(pool, `direction = 'outbound' AND sent_at IS NOT NULL`);
      await pool.query('DELETE FROM usage_records WHERE source_id = $1', [m.id]);

      const text = await command([], url);
      expect(text.code).toBe(1);
      expect(text.stdout).toContain(`✘ 4  message segments billed exactly once (checked `);
      expect(text.stdout).toContain(`: 1 violation: ${m.id}\n`);
      expect(text.stdout).toMatch(/^✘ 1 of 29 checks broken: 1 violation \(invariant 4\)$/m);

      const json = await command(['--json'], url);
      expect(json.code).toBe(1);
      const report = JSON.parse(json.stdout) as AuditReport;
      expect(report.ok).toBe(false);
      expect(report.checks).toHaveLength(29);
      expect(report.checks.find((c) => c.key === 'messages.billed_once')).toMatchObject({
        invariant: 4,
        violations: 1,
        sample: [m.id],
        unit: 'messages',
      });
    });
  });

  it('--json on a clean database says ok', async () => {
    await withClone(async ({ url }) => {
      const { code, stdout } = await command(['--json'], url);
      expect(code).toBe(0);
      const report = JSON.parse(stdout) as AuditReport;
      expect(report.ok).toBe(true);
      expect(report.checks.map((c) => c.invariant)).toEqual([
        1, 1, 2, 3, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 8, 9, 9, 9, 10, 10, 11, 12,
      ]);
    });
  });

  it('--grace decides when an unprocessed carrier event is overdue', async () => {
    await withClone(async ({ url, pool }) => {
      const ev = await one<{ id: string }>(
        pool,
        `INSERT INTO carrier_events (carrier_event_id, event_type, payload, created_at) VALUES ($1, 'call.hangup', '{}', now() - interval '10 seconds') RETURNING id`,
        [randomUUID()],
      );
      expect((await command([], url)).code).toBe(0);
      expect((await command(['--grace', '30s'], url)).code).toBe(0);
      const strict = await command(['--grace', '5'], url);
      expect(strict.code).toBe(1);
      expect(strict.stdout).toContain(`carrier events older than 5 s): 1 violation: ${ev.id}`);
    });
  });

  it('exits 2 on bad flags and when the database cannot be audited', async () => {
    const bad = await command(['--grace', 'soon'], source.url);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--grace must be a number of seconds');
    expect(bad.stderr).toContain('usage: handset audit');
    expect((await command(['--verbose'], source.url)).code).toBe(2);
    const help = await command(['--help'], source.url);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('usage: handset audit');

    const missing = await command([], withDatabase(inject('adminUrl'), 'handset_no_such_database'));
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/^handset audit: could not audit the database: .*handset_no_such_database/);
  });
});
