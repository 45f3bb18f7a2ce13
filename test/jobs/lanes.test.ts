// Named queues (the delivery lanes) with graphile-worker: a worker asks for its
// next job before its last one's completion is written, so the queue's next job
// is invisible at that moment and, with nothing inserted to NOTIFY anyone, would
// wait for the poll. The runner nudges its pool as a lane job's completion lands.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withTx } from '../../src/db/tx.js';
import { enqueue } from '../../src/jobs/enqueue.js';
import { type JobRunner, startJobRunner } from '../../src/jobs/runner.js';
import { createLogger } from '../../src/telemetry/log.js';
import { Metrics } from '../../src/telemetry/metrics.js';
import { createTestDatabase, eventually, type TestDatabase } from '../support/db.js';

const POLL_MS = 2000;
const JOBS = 10;

let db: TestDatabase;
let runner: JobRunner;
const runs: number[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  runner = await startJobRunner({
    pool: db.pool,
    log: createLogger(process.env.TEST_LOG_LEVEL ?? 'silent'),
    metrics: new Metrics({ defaultMetrics: false }),
    concurrency: 4,
    staleAfterMs: 30_000,
    pollIntervalMs: POLL_MS,
    tasks: {
      maintenance: async () => {
        runs.push(Date.now());
      },
    },
  });
});
afterAll(async () => {
  await runner.stop();
  await db.drop();
});

describe('a named queue', () => {
  it('drains as fast as its jobs run, not one job per poll', async () => {
    await withTx(db.pool, async (tx) => {
      for (let i = 0; i < JOBS; i++) await enqueue(tx, 'maintenance', {}, { queueName: 'lane:test' });
    });
    await eventually(async () => runs.length === JOBS, 60_000);
    // One at a time, as a named queue must…
    expect(runs).toEqual([...runs].sort((a, b) => a - b));
    // …and the nine hand-overs take less than two polls in all, where waiting for
    // the poll at each would take several.
    expect(runs.at(-1)! - runs[0]!).toBeLessThan(2 * POLL_MS);
  });
});
