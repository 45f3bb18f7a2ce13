// Starts Handset roles in this test process against a test database, configured
// through the same loadConfig path as production, with ports picked by the OS.

import { loadConfig, type Config, type Role } from '../../src/config.js';
import { keyring } from '../../src/delivery/keyring.js';
import { startPlatform, type Platform, type PlatformOptions } from '../../src/platform.js';
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

/** The tests' HANDSET_SECRET_KEY (every test process seals with it; nothing real is ever sealed). */
export const TEST_SECRET_KEY = Buffer.alloc(32, 7).toString('base64');

/** A keyring with that key, for tests that build roles' parts themselves. */
export const testKeys = keyring([Buffer.from(TEST_SECRET_KEY, 'base64')]);

export function testConfig(env: Record<string, string> = {}): Config {
  return loadConfig(
    {
      HANDSET_HOST: '127.0.0.1',
      HANDSET_API_PORT: '0',
      HANDSET_INGEST_PORT: '0',
      HANDSET_WORKER_STALE_AFTER: '3s',
      HANDSET_ALLOW_PRIVATE_WEBHOOK_URLS: 'true',
      TELNYX_API_KEY: 'KEY_test',
      HANDSET_SECRET_KEY: TEST_SECRET_KEY,
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
