// Configuration: a bad value stops start-up with one line naming the variable.

import { describe, expect, it } from 'vitest';
import { formatDuration, loadConfig, parseDuration } from '../../src/config.js';
import { runHandset } from '../support/process.js';

describe('configuration', () => {
  it.each([
    [{ HANDSET_API_PORT: 'abc' }, 'HANDSET_API_PORT'],
    [{ HANDSET_INGEST_PORT: '70000' }, 'HANDSET_INGEST_PORT'],
    [{ TELNYX_PUBLIC_KEY: 'c2hvcnQ=' }, 'TELNYX_PUBLIC_KEY'],
    [{ HANDSET_DELIVERY_RETRY_SCHEDULE: '5s,soon' }, 'HANDSET_DELIVERY_RETRY_SCHEDULE'],
    [{ HANDSET_DELIVERY_RETRY_SCHEDULE: '1s,1s,1s,1s,1s,1s,1s,1s,1s' }, 'HANDSET_DELIVERY_RETRY_SCHEDULE'],
    [{ HANDSET_TRANSCRIPTION_RETRY_SCHEDULE: '5s,later' }, 'HANDSET_TRANSCRIPTION_RETRY_SCHEDULE'],
    [{ HANDSET_ALLOW_PRIVATE_WEBHOOK_URLS: 'maybe' }, 'HANDSET_ALLOW_PRIVATE_WEBHOOK_URLS'],
    [{ HANDSET_CARRIER_EVENT_RETENTION: '30 days' }, 'HANDSET_CARRIER_EVENT_RETENTION'],
    [{ LOG_LEVEL: 'loud' }, 'LOG_LEVEL'],
    [{ HANDSET_ADDRESS_RATE_LIMIT: 'lots' }, 'HANDSET_ADDRESS_RATE_LIMIT'],
    [{ HANDSET_ADDRESS_RATE_LIMIT: '0' }, 'HANDSET_ADDRESS_RATE_LIMIT'],
    [{ HANDSET_API_REPLICAS: '0' }, 'HANDSET_API_REPLICAS'],
    [{ HANDSET_TRUSTED_PROXIES: '10.0.0.1,proxy.internal' }, 'HANDSET_TRUSTED_PROXIES'],
    [{ HANDSET_TRUSTED_PROXIES: '10.0.0.0/33' }, 'HANDSET_TRUSTED_PROXIES'],
    [{ HANDSET_TRUSTED_PROXIES: 'fd00::/129' }, 'HANDSET_TRUSTED_PROXIES'],
    [{ HANDSET_TRUSTED_PROXIES: '10.0.0.0/8/8' }, 'HANDSET_TRUSTED_PROXIES'],
    [{ DATABASE_URL: 'mysql://x' }, 'DATABASE_URL'],
    [{}, 'DATABASE_URL'], // serve needs a database
  ])('%o stops start-up with one line naming %s', async (env, variable) => {
    const r = await runHandset(['serve'], {
      DATABASE_URL: 'postgres://127.0.0.1:1/x',
      ...env,
      ...(variable === 'DATABASE_URL' && !('DATABASE_URL' in env) ? { DATABASE_URL: '' } : {}),
    });
    expect(r.code).toBe(2);
    const lines = r.output.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(new RegExp(`^handset: configuration error: ${variable}: `));
  });

  it('the api role needs the carrier API key (a number claim is checked at the carrier)', async () => {
    const r = await runHandset(['serve', '--roles', 'api'], { DATABASE_URL: 'postgres://127.0.0.1:1/x' });
    expect(r.code).toBe(2);
    expect(r.output.trim()).toBe(
      'handset: configuration error: TELNYX_API_KEY: is required by the api and worker roles',
    );
  });

  it('the ingest role needs the carrier public key', async () => {
    const r = await runHandset(['serve', '--roles', 'ingest'], { DATABASE_URL: 'postgres://127.0.0.1:1/x' });
    expect(r.code).toBe(2);
    expect(r.output.trim()).toBe('handset: configuration error: TELNYX_PUBLIC_KEY: is required by the ingest role');
  });

  it('every variable has its documented default', () => {
    const c = loadConfig({}, 'serve');
    expect(c).toMatchObject({
      databaseUrl: null,
      host: '0.0.0.0',
      apiPort: 3000,
      ingestPort: 3001,
      webhookToleranceSeconds: 300,
      endpointDisableAfter: 100,
      allowPrivateWebhookUrls: false,
      workerConcurrency: 10,
      logLevel: 'info',
    });
    expect(c.telnyx.apiUrl).toBe('https://api.telnyx.com/v2');
    expect(c.deliveryRetrySchedule).toEqual([5e3, 3e5, 18e5, 72e5, 18e6, 36e6, 504e5, 72e6]);
    expect(c.carrierEventRetentionMs).toBe(30 * 86_400_000);
    expect(c).toMatchObject({ apiRateLimit: 100, addressRateLimit: 1000, apiReplicas: 1, trustedProxies: [] });
    expect(
      loadConfig({ HANDSET_TRUSTED_PROXIES: ' 10.0.0.1, 10.1.0.0/16 ,fd00::/8,::1' }, 'serve').trustedProxies,
    ).toEqual(['10.0.0.1', '10.1.0.0/16', 'fd00::/8', '::1']);
    expect(loadConfig({}, 'dev')).toMatchObject({ host: '127.0.0.1', allowPrivateWebhookUrls: true });
  });

  it('durations take ms, s, m, h and d', () => {
    expect(['250ms', '5s', '5m', '2h', '30d', '1.5s', 'x', '5', '-1s'].map(parseDuration)).toEqual([
      250,
      5000,
      300000,
      7200000,
      2592000000,
      1500,
      null,
      null,
      null,
    ]);
  });

  it('a duration is shown in the largest unit that holds it whole, and reads back the same', () => {
    const ms = [250, 1500, 5000, 90_000, 60_000, 3_600_000, 2_592_000_000];
    expect(ms.map(formatDuration)).toEqual(['250ms', '1500ms', '5s', '90s', '1m', '1h', '30d']);
    expect(ms.map(formatDuration).map(parseDuration)).toEqual(ms);
  });
});
