import { defineConfig } from 'vitest/config';

// Files that measure time or memory against a baseline of their own, kill and
// cut processes on purpose, or load the whole machine: they run one at a time,
// after the rest, with nothing beside them. Everything else runs two files at a
// time (the machines have two cores; most of a test's time is waiting on
// PostgreSQL and processes it started), including the long ones that mostly wait:
// a fresh clone's install, the README's commands, a server's 30 s request timeout.
const ALONE = [
  'test/chaos/*.test.ts',
  'test/bench/bench.test.ts',
  'test/inbox/bench.test.ts',
  'test/inbox/end-to-end.test.ts',
  'test/security/slow-body-storm.test.ts',
  // Not relay.test.ts (rows read by a claim, not time) nor delivery.test.ts (what a receiver verifies).
  'test/delivery/capacity.test.ts',
  'test/delivery/fair-share.test.ts',
  'test/delivery/fairness.test.ts',
  'test/delivery/operations.test.ts',
  'test/delivery/races.test.ts',
  'test/delivery/successes.test.ts',
  'test/delivery/window.test.ts',
  'test/accounts/revocation.test.ts',
  'test/carrier/relay.test.ts',
  'test/jobs/recovery.test.ts',
  'test/security/address-limit.test.ts',
  'test/security/ingest.hostile.test.ts',
  'test/messages/dispatch-fairness.test.ts',
  'test/messages/batched-dispatch.test.ts',
  'test/messages/pace.test.ts',
  'test/messages/validity.test.ts',
  'test/carrier/throttle.test.ts',
  'test/carrier/failover.test.ts',
  'test/reliability/*.test.ts',
];

export default defineConfig({
  test: {
    globalSetup: ['test/support/global-setup.ts'],
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Tests that kill processes or wait on retries are slow by nature; keep the
    // report readable by flagging only the really slow ones.
    slowTestThreshold: 10_000,
    projects: [
      {
        extends: true,
        test: {
          name: 'side-by-side',
          include: ['test/**/*.test.ts', 'packages/*/test/**/*.test.ts'],
          exclude: ALONE,
          maxWorkers: 2,
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: { name: 'alone', include: ALONE, maxWorkers: 1, sequence: { groupOrder: 1 } },
      },
    ],
  },
});
