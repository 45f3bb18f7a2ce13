import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts', 'packages/*/test/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    pool: 'forks',
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Tests that kill processes or wait on retries are slow by nature; keep the
    // report readable by flagging only the really slow ones.
    slowTestThreshold: 10_000,
  },
});
