// GET /metrics behind HANDSET_METRICS_TOKEN: with it set, every HTTP role (ingest
// and API) answers 401 without `Authorization: Bearer <token>` or with another
// token, and the metrics with it; unset, /metrics is open as before. `serve`
// bound to a non-loopback address without a token says so at start.

import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Platform } from '../../src/platform.js';
import { telnyxKeys } from '../support/carrier.js';
import { createTestDatabase, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';
import { serveRoles } from '../support/process.js';

const keys = telnyxKeys();
const TOKEN = randomBytes(24).toString('base64url');
let db: TestDatabase;
let guarded: Platform;
let open: Platform;

beforeAll(async () => {
  db = await createTestDatabase();
  guarded = await startTestPlatform({
    databaseUrl: db.url,
    keys,
    roles: ['ingest', 'api'],
    env: { HANDSET_METRICS_TOKEN: TOKEN },
  });
  open = await startTestPlatform({ databaseUrl: db.url, keys, roles: ['ingest', 'api'] });
});
afterAll(async () => {
  await guarded.stop();
  await open.stop();
  await db.drop();
});

const scrape = async (base: string, authorization?: string) => {
  const res = await fetch(`${base}/metrics`, { headers: authorization ? { authorization } : {} });
  return { status: res.status, text: await res.text(), challenge: res.headers.get('www-authenticate') };
};

describe('with HANDSET_METRICS_TOKEN set', () => {
  it.each(['ingest', 'api'] as const)(
    '%s answers /metrics 401 without the token or with another, 200 with it',
    async (role) => {
      const base = role === 'ingest' ? guarded.ingestUrl! : guarded.apiUrl!;
      for (const authorization of [
        undefined,
        'Bearer',
        `Bearer ${TOKEN.slice(0, -1)}`,
        `Bearer ${TOKEN}x`,
        `Basic ${Buffer.from(`x:${TOKEN}`).toString('base64')}`,
        TOKEN,
      ]) {
        const r = await scrape(base, authorization);
        expect([authorization, r.status, r.challenge]).toEqual([authorization, 401, 'Bearer']);
        expect(r.text).not.toContain('handset_');
      }
      const ok = await scrape(base, `Bearer ${TOKEN}`);
      expect(ok.status).toBe(200);
      expect(ok.text).toContain('handset_ingest_requests_total');
      expect((await scrape(base, `bearer ${TOKEN}`)).status).toBe(200); // the scheme's case does not matter
      // the other operational routes stay open to health checks
      expect((await fetch(`${base}/healthz`)).status).toBe(200);
      expect((await fetch(`${base}/readyz`)).status).toBe(200);
    },
  );
});

describe('without it', () => {
  it.each(['ingest', 'api'] as const)('%s answers /metrics to anyone', async (role) => {
    const r = await scrape(role === 'ingest' ? open.ingestUrl! : open.apiUrl!);
    expect(r.status).toBe(200);
    expect(r.text).toContain('handset_ingest_requests_total');
  });
});

describe('at start', () => {
  const WARNING = /HANDSET_METRICS_TOKEN is not set/;
  it.each([
    ['0.0.0.0', {}, true],
    ['0.0.0.0', { HANDSET_METRICS_TOKEN: TOKEN }, false],
    ['127.0.0.1', {}, false],
  ] as const)('serve on %s with %o warns about an open /metrics: %s', async (host, env, warns) => {
    const s = await serveRoles('ingest', {
      DATABASE_URL: db.url,
      TELNYX_PUBLIC_KEY: keys.publicKeyBase64,
      HANDSET_HOST: host,
      ...env,
    });
    try {
      if (warns) await s.proc.waitFor(WARNING, 10_000);
      expect((await fetch(`${s.ingestUrl}/readyz`)).status).toBe(200);
      expect(WARNING.test(s.proc.output())).toBe(warns);
    } finally {
      s.proc.child.kill('SIGTERM');
      await s.proc.exited;
    }
  });
});
