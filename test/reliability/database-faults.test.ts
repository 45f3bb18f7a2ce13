// Database faults in the middle of a storm: the connection cut for 5 s (a TCP
// proxy we control), and a PostgreSQL restart. Ingest must answer 5xx and never
// 2xx while it cannot commit; workers must recover without a restart; the
// carrier's retries after recovery are stored once; nothing is lost or doubled.
// This file runs its own embedded PostgreSQL, so it can restart it.

import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accountCreate, apiKeyCreate } from '../../src/accounts/accounts.js';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../src/db/embedded.js';
import { migrate } from '../../src/db/migrate.js';
import { createPool } from '../../src/db/pool.js';
import { withTx } from '../../src/db/tx.js';
import type { Platform } from '../../src/platform.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { createLogger } from '../../src/telemetry/log.js';
import { count, eventually } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';

const log = createLogger('silent');
const OUR = '+13125550500';
let stateDir: string;
let server: EmbeddedPostgres;
let url: string;
let admin: pg.Pool;

beforeAll(async () => {
  stateDir = await mkdtemp(path.join(tmpdir(), 'handset-faults-'));
  server = await startEmbeddedPostgres({ stateDir, log, durable: false });
  url = server.url;
  admin = createPool(url, { max: 4, applicationName: 'faults-test' });
  await migrate(admin, log);
  await withTx(admin, async (tx) => {
    const a = await accountCreate(tx, 'Faults');
    await apiKeyCreate(tx, a.id);
    await tx.query('INSERT INTO phone_numbers (account_id, number) VALUES ($1, $2)', [a.id, OUR]);
  });
});
afterAll(async () => {
  await admin.end();
  await server.stop();
  await rm(stateDir, { recursive: true, force: true });
});

interface Storm {
  sim: Simulator;
  platform: Platform;
  injected: string[];
}

/** Inbound SMS at a steady pace through ingest and the worker; timeScale 3 stretches the carrier's retries (3 s, 6 s) past the outage. */
async function stormWith(databaseUrl: string, fault: () => Promise<{ from: number; to: number }>, total = 60): Promise<Storm & { window: { from: number; to: number } }> {
  const sim = await startSimulator({ webhookUrl: null, timeScale: 3, seed: randomUUID() });
  const platform = await startTestPlatform({
    databaseUrl,
    roles: ['ingest', 'worker'],
    env: { ...sim.carrierEnv(), HANDSET_WORKER_STALE_AFTER: '2s' },
  });
  sim.setWebhookUrl(`${platform.ingestUrl}/webhooks/telnyx`);
  const injected: string[] = [];
  const prefix = `+1415${String(Math.floor(Math.random() * 900) + 100)}`;
  const sending = (async () => {
    for (let i = 0; i < total; i++) {
      const from = `${prefix}${String(injected.length).padStart(4, '0')}`;
      injected.push(from);
      sim.injectInboundSms({ from, to: OUR, text: `storm ${i}` });
      await new Promise((r) => setTimeout(r, 200));
    }
  })();
  await new Promise((r) => setTimeout(r, 3000));
  const window = await fault();
  await sending;
  await sim.idle();
  return { sim, platform, injected, window };
}

async function assertNothingLostOrDoubled(storm: Storm & { window: { from: number; to: number } }) {
  const { sim, injected, window } = storm;
  // Never a 2xx for an event that is not stored.
  const ok = sim.webhooks.filter((w) => w.status === 200 && w.eventId);
  const { rows } = await admin.query<{ id: string }>(`SELECT carrier_event_id AS id FROM carrier_events`);
  const stored = new Set(rows.map((r) => r.id));
  expect(ok.filter((w) => !stored.has(w.eventId!))).toEqual([]);
  // While the database was unreachable, answers were 5xx, never 2xx.
  const during = sim.webhooks.filter((w) => Date.parse(w.at) > window.from + 200 && Date.parse(w.at) < window.to);
  expect(during.length).toBeGreaterThan(0);
  expect(during.filter((w) => w.status !== null && w.status >= 200 && w.status < 300)).toEqual([]);
  expect(during.some((w) => w.status === 503)).toBe(true);
  // Nothing lost or doubled: every injected SMS is one message with one event; every event processed.
  await eventually(async () => (await count(admin, 'SELECT * FROM carrier_events WHERE processed_at IS NULL')) === 0, 60_000);
  const { rows: msgs } = await admin.query<{ from_number: string; n: number; events: number }>(
    `SELECT m.from_number, count(*)::int AS n, sum((SELECT count(*) FROM outbound_events e WHERE e.subject_id = m.id))::int AS events
       FROM messages m WHERE m.from_number = ANY ($1) GROUP BY m.from_number`,
    [injected],
  );
  expect(msgs).toHaveLength(injected.length);
  expect(msgs.filter((m) => m.n !== 1 || m.events !== 1)).toEqual([]);
  // the carrier retried: more attempts than facts
  expect(sim.counts.attempts).toBeGreaterThan(sim.counts.events);
}

describe('database faults during a storm', () => {
  it('the connection cut for 5 s: 5xx while cut, workers recover without restart, retries stored once, nothing lost or doubled', async () => {
    const target = new URL(url);
    const proxy: TcpProxy = await startTcpProxy('127.0.0.1', Number(target.port));
    const proxied = new URL(url);
    proxied.port = String(proxy.port);
    const storm = await stormWith(proxied.toString(), async () => {
      const from = Date.now();
      proxy.cut();
      await new Promise((r) => setTimeout(r, 5000));
      proxy.restore();
      return { from, to: Date.now() };
    });
    try {
      await assertNothingLostOrDoubled(storm);
    } finally {
      await storm.platform.stop();
      await storm.sim.close();
      await proxy.close();
    }
  });

  it('a PostgreSQL restart: the same', async () => {
    const storm = await stormWith(url, async () => {
      const from = Date.now();
      await server.stop();
      await new Promise((r) => setTimeout(r, 2000));
      server = await startEmbeddedPostgres({ stateDir, log, durable: false });
      expect(server.url).toBe(url); // same port, same credentials
      return { from, to: Date.now() };
    });
    try {
      await assertNothingLostOrDoubled(storm);
    } finally {
      await storm.platform.stop();
      await storm.sim.close();
    }
  });
});
