// Handset's roles against a server that cannot write, as a failover shows them
// one: a standby reached before the switch to the new primary, and a commit whose
// wait for the synchronous standby is cancelled (PostgreSQL then reports success
// with only a warning, though the standby may not have it). Ingest answers 503,
// never 200, for either; the API answers 503, not 500; the worker records no
// failure of the work and exits nothing; a connection that reached the standby is
// not served again once the proxy points at the primary. This file runs its own
// primary and streaming standby (the embedded binaries).

import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accountCreate, apiKeyCreate } from '../../src/accounts/accounts.js';
import { runAudit } from '../../src/audit/audit.js';
import { carrierEventStore } from '../../src/carrier/events.sql.js';
import { telnyxEnvelope } from '../../src/carrier/telnyx/events.js';
import { createDatabase, onServer, withPort } from '../../src/db/databases.js';
import {
  type EmbeddedPostgres,
  type EmbeddedStandby,
  startEmbeddedPostgres,
  startEmbeddedStandby,
} from '../../src/db/embedded.js';
import { migrate } from '../../src/db/migrate.js';
import { createPool } from '../../src/db/pool.js';
import { withTx } from '../../src/db/tx.js';
import type { Platform } from '../../src/platform.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { createLogger } from '../../src/telemetry/log.js';
import { startTcpProxy, type TcpProxy } from '../../src/tools/chaos/tcp-proxy.js';
import { count, eventually } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';

const log = createLogger('silent');
const OUR = '+13125550600';
let dir: string;
let primary: EmbeddedPostgres;
let standby: EmbeddedStandby;
let db: pg.Pool;
let dbUrl: string;
let proxy: TcpProxy;
let sim: Simulator;
let platform: Platform;
let apiKey: string;
let rejections = 0;
const countRejection = () => rejections++;

beforeAll(async () => {
  process.on('unhandledRejection', countRejection);
  dir = await mkdtemp(path.join(tmpdir(), 'handset-standby-roles-'));
  const settings = { synchronous_commit: 'on' };
  primary = await startEmbeddedPostgres({ stateDir: path.join(dir, 'primary'), log, durable: false, settings });
  dbUrl = await createDatabase(primary.url, `standby_roles_${randomBytes(4).toString('hex')}`);
  db = createPool(dbUrl, { max: 4, applicationName: 'standby-roles-test' });
  await migrate(db, log);
  apiKey = await withTx(db, async (tx) => {
    const a = await accountCreate(tx, 'Standby roles');
    await tx.query('INSERT INTO phone_numbers (account_id, number) VALUES ($1, $2)', [a.id, OUR]);
    return (await apiKeyCreate(tx, a.id)).key;
  });
  standby = await startEmbeddedStandby(primary, {
    stateDir: path.join(dir, 'standby'),
    log,
    name: 'standby',
    settings,
  });
  await eventually(async () => (await onServer(primary.url, 'SELECT 1 FROM pg_stat_replication')).length > 0, 30_000);
  proxy = await startTcpProxy('127.0.0.1', primary.port);
  sim = await startSimulator({ webhookUrl: null, seed: randomBytes(4).toString('hex') });
  platform = await startTestPlatform({
    databaseUrl: withPort(dbUrl, proxy.port),
    roles: ['ingest', 'api', 'worker'],
    env: { ...sim.carrierEnv(), HANDSET_RECONCILE_INTERVAL: '1s' },
  });
  sim.setWebhookUrl(`${platform.ingestUrl}/webhooks/telnyx`);
}, 120_000);

afterAll(async () => {
  await platform?.stop();
  await sim?.close();
  await proxy?.close();
  await db?.end();
  await standby?.stop();
  await primary?.stop();
  await rm(dir, { recursive: true, force: true });
  process.off('unhandledRejection', countRejection);
});

const attemptsFor = (eventId: string) => sim.webhooks.filter((w) => w.eventId === eventId).map((w) => w.status);

async function post(p: string, body: object, key = randomBytes(8).toString('hex')) {
  const res = await fetch(platform.apiUrl + p, {
    method: 'POST',
    headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify(body),
  });
  return { status: res.status, body: (await res.json()) as { id?: string } };
}

describe('roles against a server that cannot write', () => {
  it('a commit whose wait for the synchronous standby is cancelled is answered 503, never 200, and stored once when the carrier retries', async () => {
    await onServer(primary.url, `ALTER SYSTEM SET synchronous_standby_names = 'standby'`);
    await onServer(primary.url, 'SELECT pg_reload_conf()');
    await eventually(async () => {
      const rows = await onServer(primary.url, 'SELECT sync_state FROM pg_stat_replication');
      return rows.some((r) => r.sync_state === 'sync');
    });
    // The standby stops confirming: every commit on the primary waits for it.
    const [receiver] = await onServer(standby.url, 'SELECT pid FROM pg_stat_wal_receiver');
    const walReceiver = Number(receiver!.pid);
    process.kill(walReceiver, 'SIGSTOP');
    try {
      const { eventId } = sim.injectInboundSms({ from: '+14155550601', to: OUR, text: 'cancelled wait' });
      // The ingest's commit waiting for the standby, cancelled as an operator (or a pooler) would:
      // its own backend's wait (a worker's commit waits too, and cancelling that one answers nobody),
      // again until the carrier has its answer.
      await eventually(async () => {
        await onServer(
          primary.url,
          `SELECT pg_cancel_backend(pid) FROM pg_stat_activity
            WHERE wait_event = 'SyncRep' AND application_name = 'handset-ingest'`,
        );
        return attemptsFor(eventId).length > 0;
      }, 30_000);
      expect(attemptsFor(eventId)[0]).toBe(503);
      process.kill(walReceiver, 'SIGCONT');
      await eventually(async () => attemptsFor(eventId).includes(200), 30_000);
      expect(attemptsFor(eventId).filter((s) => s === 200)).toHaveLength(1);
      expect(await count(db, 'SELECT 1 FROM carrier_events WHERE carrier_event_id = $1', [eventId])).toBe(1);
    } finally {
      process.kill(walReceiver, 'SIGCONT');
      await onServer(primary.url, 'ALTER SYSTEM RESET synchronous_standby_names');
      await onServer(primary.url, 'SELECT pg_reload_conf()');
    }
  }, 90_000);

  it('on a standby ingest and the API answer 503, the worker records no failure, and once the proxy points at the primary nothing of the standby is served', async () => {
    proxy.switchTo(standby.port);
    const { eventId: during } = sim.injectInboundSms({ from: '+14155550603', to: OUR, text: 'sent to a standby' });
    await eventually(async () => attemptsFor(during).length > 0, 30_000);
    expect(attemptsFor(during)[0]).toBe(503);
    const send = await post('/v1/messages', { from: OUR, to: '+15555550100', body: 'while on a standby' });
    expect(send.status).toBe(503);
    // The event reaches the primary another way (another ingest) and the standby replays it: the worker,
    // on the standby, finds work it cannot claim.
    const webhook = sim.webhooks.find((w) => w.eventId === during)!;
    const envelope = telnyxEnvelope(JSON.parse(webhook.body))!;
    await carrierEventStore(db, {
      carrier: 'telnyx',
      carrierEventId: envelope.eventId,
      eventType: envelope.eventType,
      subject: envelope.subject,
      rawJson: webhook.body,
    });
    const replicated = withPort(dbUrl, standby.port);
    await eventually(async () => (await onServer(replicated, 'SELECT 1 FROM carrier_events')).length >= 2, 30_000);
    await new Promise((r) => setTimeout(r, 1000)); // the worker's relay polls meanwhile

    // A pool refuses a connection to a standby at once, even for a statement a standby could answer.
    const onStandby = createPool(withPort(dbUrl, standby.port), { max: 1, applicationName: 'standby-roles-probe' });
    await expect(onStandby.query('SELECT 1')).rejects.toMatchObject({ code: '25006' });
    await onStandby.end();

    // A proxy that moves only new connections: any connection a role kept on the standby would stay there.
    proxy.switchTo(primary.port, { keepOpen: true });
    const after = await post('/v1/messages', { from: OUR, to: '+15555550100', body: 'after the switch' });
    expect(after.status).toBe(201);
    await eventually(async () => (await count(db, 'SELECT 1 FROM carrier_events WHERE processed_at IS NULL')) === 0);
    // Stored once and processed, with no failure counted against it; one inbound message.
    expect(await count(db, 'SELECT 1 FROM carrier_events WHERE carrier_event_id = $1', [during])).toBe(1);
    expect(await count(db, 'SELECT 1 FROM carrier_events WHERE error IS NOT NULL OR attempts > 0')).toBe(0);
    expect(await count(db, `SELECT 1 FROM messages WHERE body = 'sent to a standby'`)).toBe(1);
    expect(rejections).toBe(0);
    // The audit reads in one repeatable-read snapshot: a standby serves it.
    const replica = new pg.Pool({ connectionString: replicated, max: 1 });
    try {
      const report = await runAudit(replica, { graceSeconds: 3600 });
      expect(report.checks.length).toBeGreaterThan(0);
    } finally {
      await replica.end();
    }
  }, 120_000);
});
