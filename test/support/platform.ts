// Starts Handset roles in this test process against a test database, configured
// through the same loadConfig path as production, with ports picked by the OS.

import { loadConfig, type Config } from '../../src/config.js';
import { startPlatform, type Platform, type PlatformOptions, type Role } from '../../src/platform.js';
import { createLogger } from '../../src/telemetry/log.js';
import type { TelnyxKeys } from './carrier.js';

export interface TestPlatformOptions {
  databaseUrl: string;
  keys?: TelnyxKeys;
  roles?: Role[];
  env?: Record<string, string>;
  handlers?: PlatformOptions['handlers'];
  log?: PlatformOptions['log'];
  tasks?: PlatformOptions['tasks'];
  carriers?: PlatformOptions['carriers'];
}

export function testConfig(env: Record<string, string> = {}): Config {
  return loadConfig(
    {
      HANDSET_HOST: '127.0.0.1',
      HANDSET_API_PORT: '0',
      HANDSET_INGEST_PORT: '0',
      HANDSET_WORKER_STALE_AFTER: '3s',
      HANDSET_ALLOW_PRIVATE_WEBHOOK_URLS: 'true',
      TELNYX_API_KEY: 'KEY_test',
      TELNYX_API_URL: 'http://127.0.0.1:9/v2', // nothing listens: tests that dispatch point it at their carrier
      LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
      ...env,
    },
    'serve',
  );
}

export async function startTestPlatform(opts: TestPlatformOptions): Promise<Platform> {
  const config = testConfig({ ...(opts.keys ? { TELNYX_PUBLIC_KEY: opts.keys.publicKeyBase64 } : {}), ...opts.env });
  return startPlatform({
    config,
    databaseUrl: opts.databaseUrl,
    roles: opts.roles ?? ['ingest', 'worker'],
    log: opts.log ?? createLogger(config.logLevel),
    ...(opts.handlers ? { handlers: opts.handlers } : {}),
    ...(opts.tasks ? { tasks: opts.tasks } : {}),
    ...(opts.carriers ? { carriers: opts.carriers } : {}),
  });
}
