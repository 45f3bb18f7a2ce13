// Crash recovery: graphile-worker would leave a SIGKILLed worker's job locked for
// four hours; our heartbeat + sweeper unlock it once the worker is silent past
// HANDSET_WORKER_STALE_AFTER, and the job runs again. The carrier-event relay needs
// no sweeper: a killed worker's claimed batch is released with its transaction.
// Real processes, real SIGKILL.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { loadConfig } from '../../src/config.js';
import { telnyxWebhook } from '../../src/sim/simulator.js';
import { envelope } from '../support/carrier.js';
import { recoveryTimings } from '../../src/jobs/runner.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { spawnHandset, type HandsetProcess } from '../support/process.js';

let db: TestDatabase;
const procs: HandsetProcess[] = [];
beforeAll(async () => {
  db = await createTestDatabase();
});
afterAll(async () => {
  for (const p of procs) p.child.kill('SIGKILL');
  await db.drop();
});

const STALE_AFTER_MS = 2000;
const worker = () => {
  const p = spawnHandset(['serve', '--roles', 'worker'], {
    DATABASE_URL: db.url,
    HANDSET_WORKER_STALE_AFTER: `${STALE_AFTER_MS}ms`,
    TELNYX_API_KEY: 'KEY_test',
  });
  procs.push(p);
  return p;
};

describe('worker crash recovery', () => {
  it('a job whose worker is SIGKILLed mid-run runs again within the sweeper bound', async () => {
    // A job left by an earlier release for an event processed since: the job locks the row before
    // it looks, so it waits on the lock held below (and the relay, which claims pending rows only, leaves it).
    const { rows } = await db.pool.query(
      `INSERT INTO carrier_events (carrier_event_id, event_type, payload, processed_at)
       VALUES ('crash-1', 'call.bridged', '{"data":{"id":"crash-1","event_type":"call.bridged"}}', now()) RETURNING id`,
    );
    const eventId: string = rows[0].id;

    // Hold the event row's lock so the first worker is stuck inside the job.
    const locker = await db.pool.connect();
    await locker.query('BEGIN');
    await locker.query('SELECT 1 FROM carrier_events WHERE id = $1 FOR UPDATE', [eventId]);

    const a = worker();
    await a.waitFor(/worker running/);
    await db.pool.query(
      `SELECT graphile_worker.add_job('carrier_event.process', json_build_object('eventId', $1::text))`,
      [eventId],
    );
    const lockedBy = await eventually(async () => {
      const r = await db.pool.query(`SELECT locked_by FROM graphile_worker.jobs WHERE locked_by IS NOT NULL`);
      return r.rows[0]?.locked_by as string | undefined;
    });

    a.child.kill('SIGKILL');
    await a.exited;
    const killedAt = Date.now();
    await locker.query('COMMIT');
    locker.release();

    // Still locked by the dead pool: nothing runs it until the sweeper acts.
    expect(
      (
        await db.pool.query(
          `SELECT locked_by FROM graphile_worker.jobs WHERE task_identifier = 'carrier_event.process'`,
        )
      ).rows[0].locked_by,
    ).toBe(lockedBy);

    const b = worker();
    await b.waitFor(/worker running/);
    await eventually(
      async () =>
        (
          await db.pool.query(
            `SELECT count(*)::int AS n FROM graphile_worker.jobs WHERE task_identifier = 'carrier_event.process'`,
          )
        ).rows[0].n === 0,
      30_000,
    );
    const recoveredAfterMs = Date.now() - killedAt;
    // The dead process had two pools (its job and delivery runners): both are unlocked.
    await b.waitFor(new RegExp(`"pools":\\[[^\\]]*"${lockedBy}"[^\\]]*\\],"msg":"unlocked jobs of silent workers"`));
    // Generous: the bound plus a sweep interval plus process start-up.
    expect(recoveredAfterMs).toBeLessThan(STALE_AFTER_MS + 10_000);
    expect(
      await db.pool
        .query(`SELECT count(*)::int AS n FROM graphile_worker.jobs WHERE task_identifier = 'carrier_event.process'`)
        .then((r) => r.rows[0].n),
    ).toBe(0);
    b.child.kill('SIGTERM');
    expect((await b.exited).code).toBe(0);
  });
});

describe('the carrier-event relay', () => {
  it('a job the database shows locked by a live worker that does not hold it (its completion lost in a failover) runs again within the sweeper bound', async () => {
    const a = worker();
    await a.waitFor(/worker running/);
    const poolId = await eventually(async () => {
      const r = await db.pool.query(`SELECT pool_id FROM worker_heartbeats`);
      return r.rows[0]?.pool_id as string | undefined;
    });
    const { rows } = await db.pool.query(
      `INSERT INTO carrier_events (carrier_event_id, event_type, payload, processed_at)
       VALUES ('forgotten-1', 'call.bridged', '{"data":{"id":"forgotten-1","event_type":"call.bridged"}}', now()) RETURNING id`,
    );
    // As a standby that missed the pool's last completion shows it after promotion: locked by a pool
    // that is alive and heartbeating, which has long finished with it.
    await db.pool.query(
      `SELECT graphile_worker.add_job('carrier_event.process', json_build_object('eventId', $1::text),
                                      run_at => now() + interval '1 hour')`,
      [rows[0].id],
    );
    await db.pool.query(
      `UPDATE graphile_worker._private_jobs SET locked_by = $1, locked_at = now() - interval '10 seconds', run_at = now()
        WHERE id = (SELECT id FROM graphile_worker.jobs WHERE task_identifier = 'carrier_event.process')`,
      [poolId],
    );
    await eventually(
      async () =>
        (await count(db.pool, `SELECT 1 FROM graphile_worker.jobs WHERE task_identifier = 'carrier_event.process'`)) ===
        0,
      recoveryTimings(STALE_AFTER_MS).rerunWithinMs + 10_000,
    );
    expect(a.child.exitCode).toBeNull();
    a.child.kill('SIGTERM');
    await a.exited;
  });

  it('a worker SIGKILLed with a batch claimed and half run commits nothing; the next worker applies each event once, with no sweeper', async () => {
    const carrierId = `crash-msg-${Date.now()}`;
    const { rows: m } = await db.pool.query(
      `WITH a AS (INSERT INTO accounts (name) VALUES ('relay crash') RETURNING id)
       INSERT INTO messages (account_id, direction, from_number, to_number, body, encoding, segments, carrier,
                             carrier_message_id, status, sent_at)
       SELECT a.id, 'outbound', '+13125550142', '+15555550100', 'hi', 'GSM-7', 1, 'telnyx', $1, 'sent', now() FROM a
       RETURNING id`,
      [carrierId],
    );
    const messageId: string = m[0].id;
    // The delivery receipt first: the batch blocks on the message row held below, with the rest claimed behind it.
    const receipt = telnyxWebhook.messageFinalized({
      messageId: carrierId,
      from: '+13125550142',
      to: '+15555550100',
      status: 'delivered',
      eventId: randomUUID(),
    });
    const ids: string[] = [];
    const store = async (id: string, type: string, payload: string) =>
      ids.push(
        (
          await db.pool.query(
            `INSERT INTO carrier_events (carrier_event_id, event_type, payload, subject) VALUES ($1, $2, $3::jsonb, $4) RETURNING id`,
            [id, type, payload, type === 'message.finalized' ? carrierId : null],
          )
        ).rows[0].id,
      );
    const locker = await db.pool.connect();
    await locker.query('BEGIN');
    await locker.query('SELECT 1 FROM messages WHERE id = $1 FOR UPDATE', [messageId]);
    await store(JSON.parse(receipt).data.id, 'message.finalized', receipt);
    for (let i = 0; i < 4; i++) {
      await store(
        `relay-crash-${i}`,
        'call.machine.detection.ended',
        envelope(`relay-crash-${i}`, 'call.machine.detection.ended'),
      );
    }

    const a = worker();
    await a.waitFor(/worker running/);
    // A's batch holds all five claimed and waits on the message row.
    await eventually(
      async () =>
        (
          await db.pool.query(
            `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`,
          )
        ).rows[0].n > 0,
    );
    a.child.kill('SIGKILL');
    await a.exited;
    const killedAt = Date.now();
    await locker.query('COMMIT');
    locker.release();

    const b = worker();
    await b.waitFor(/worker running/);
    await eventually(
      async () =>
        (await count(db.pool, 'SELECT * FROM carrier_events WHERE id = ANY($1) AND processed_at IS NULL', [ids])) === 0,
      30_000,
    );
    // Well inside the sweeper's bound: nothing waited for a stale heartbeat.
    expect(Date.now() - killedAt).toBeLessThan(STALE_AFTER_MS + 10_000);
    expect(
      await count(db.pool, `SELECT * FROM message_status_history WHERE message_id = $1 AND status = 'delivered'`, [
        messageId,
      ]),
    ).toBe(1);
    expect(
      await count(db.pool, `SELECT * FROM outbound_events WHERE subject_id = $1 AND type = 'message.delivered'`, [
        messageId,
      ]),
    ).toBe(1);
    expect((await db.pool.query('SELECT status FROM messages WHERE id = $1', [messageId])).rows[0].status).toBe(
      'delivered',
    );
    b.child.kill('SIGTERM');
    expect((await b.exited).code).toBe(0);
  });
});

describe('the default recovery bound', () => {
  it('a dial job whose worker died after the carrier accepted it runs again inside the 60 s in which Telnyx ignores its repeated command_id', () => {
    const config = loadConfig({ DATABASE_URL: 'postgres://localhost/x', TELNYX_API_KEY: 'KEY_x' }, 'serve');
    expect(recoveryTimings(config.workerStaleAfterMs).rerunWithinMs).toBeLessThan(60_000);
  });
});
