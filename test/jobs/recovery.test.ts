// Crash recovery: graphile-worker would leave a SIGKILLed worker's job locked for
// four hours; our heartbeat + sweeper unlock it once the worker is silent past
// HANDSET_WORKER_STALE_AFTER, and the job runs again. Real processes, real SIGKILL.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config.js';
import { recoveryTimings } from '../../src/jobs/runner.js';
import { createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
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
    const { rows } = await db.pool.query(
      `INSERT INTO carrier_events (carrier_event_id, event_type, payload)
       VALUES ('crash-1', 'call.bridged', '{"data":{"id":"crash-1","event_type":"call.bridged"}}') RETURNING id`,
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
    const processed = await eventually(async () => {
      const r = await db.pool.query('SELECT processed_at FROM carrier_events WHERE id = $1', [eventId]);
      return r.rows[0].processed_at as Date | null;
    }, 30_000);
    const recoveredAfterMs = processed.getTime() - killedAt;
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

describe('the default recovery bound', () => {
  it('a dial job whose worker died after the carrier accepted it runs again inside the 60 s in which Telnyx ignores its repeated command_id', () => {
    const config = loadConfig({ DATABASE_URL: 'postgres://localhost/x', TELNYX_API_KEY: 'KEY_x' }, 'serve');
    expect(recoveryTimings(config.workerStaleAfterMs).rerunWithinMs).toBeLessThan(60_000);
  });
});
