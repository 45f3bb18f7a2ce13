// PostgreSQL going away in the middle of real traffic, as an operator meets it:
// `handset serve` processes (all roles in one, or each role in its own) reach the
// database through a TCP proxy that is cut for 1 s and then 5 s at random moments,
// or the database itself is restarted (fast shutdown, start), while inbound SMS,
// outbound sends with receipts and a sequential-ring call flow. No process may
// exit; /readyz says unavailable during the cut and ready after; ingest answers
// 503, never a 2xx for an event it did not store; afterwards every message and
// call reaches its end with one customer event per transition, billed once, and
// `handset audit` is clean. (The 30 s cuts are the chaos run's.) This file runs
// its own PostgreSQL, so it can restart it.

import { mkdtemp, rm } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { accountCreate, apiKeyCreate } from '../../src/accounts/accounts.js';
import { runAudit } from '../../src/audit/audit.js';
import { createDatabase } from '../../src/db/databases.js';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../src/db/embedded.js';
import { migrate } from '../../src/db/migrate.js';
import { createPool } from '../../src/db/pool.js';
import { withTx } from '../../src/db/tx.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { createLogger } from '../../src/telemetry/log.js';
import { count, eventually } from '../support/db.js';
import { serveRoles, type HandsetProcess, type Served } from '../support/process.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';

const log = createLogger('silent');
const OUR = '+13125550500';
const DELIVERED = '+15555550100';
const RING = ['+15555550110', '+15555550113']; // never answers (timeout); answers after 2 s, talks 5 s
const RECONCILE = { intervalMs: 1000, afterMs: 2000, messageAfterMs: 3000 };
// How long everything may take to settle after the traffic; the traffic tests' own
// timeout leaves room for it, so a failure says what is still waiting.
const SETTLE_MS = 90_000;
const TRAFFIC_TEST_MS = SETTLE_MS + 60_000;

let stateDir: string;
let server: EmbeddedPostgres;
const procs: HandsetProcess[] = [];

beforeAll(async () => {
  stateDir = await mkdtemp(path.join(tmpdir(), 'handset-outages-'));
  server = await startEmbeddedPostgres({ stateDir, log, durable: false, maxConnections: 300 });
});
afterAll(async () => {
  for (const p of procs) p.child.kill('SIGKILL');
  await server.stop();
  await rm(stateDir, { recursive: true, force: true });
});

interface World {
  db: pg.Pool;
  url: string;
  proxy: TcpProxy;
  sim: Simulator;
  apiKey: string;
  env: Record<string, string>;
}

/** A database of its own, the proxy in front of it, an account with a number, and the simulator. */
async function world(): Promise<World> {
  const url = await createDatabase(server.url, `outage_${randomBytes(4).toString('hex')}`);
  const db = createPool(url, { max: 4, applicationName: 'outages-test' });
  await migrate(db, log);
  const apiKey = await withTx(db, async (tx) => {
    const a = await accountCreate(tx, 'Outages');
    await tx.query('INSERT INTO phone_numbers (account_id, number) VALUES ($1, $2)', [a.id, OUR]);
    return (await apiKeyCreate(tx, a.id)).key;
  });
  const proxy = await startTcpProxy('127.0.0.1', Number(new URL(url).port));
  const proxied = new URL(url);
  proxied.port = String(proxy.port);
  const sim = await startSimulator({ webhookUrl: null, seed: randomBytes(4).toString('hex') });
  const env = {
    DATABASE_URL: proxied.toString(),
    ...sim.carrierEnv(),
    HANDSET_WORKER_STALE_AFTER: '3s',
    HANDSET_RECONCILE_INTERVAL: `${RECONCILE.intervalMs}ms`,
    HANDSET_RECONCILE_AFTER: `${RECONCILE.afterMs}ms`,
    HANDSET_RECONCILE_MESSAGE_AFTER: `${RECONCILE.messageAfterMs}ms`,
  };
  return { db, url, proxy, sim, apiKey, env };
}

async function serve(w: World, roles: string): Promise<Served> {
  const s = await serveRoles(roles, w.env);
  procs.push(s.proc);
  return s;
}

/** POST with an Idempotency-Key, retried while the API cannot answer (503 during an outage). */
async function create(apiUrl: string, apiKey: string, p: string, body: object): Promise<string> {
  const key = randomBytes(8).toString('hex');
  for (;;) {
    const res = await fetch(apiUrl + p, {
      method: 'POST',
      headers: { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify(body),
    }).catch(() => null);
    if (res?.status === 201) return ((await res.json()) as { id: string }).id;
    if (res && ![409, 429, 503].includes(res.status)) throw new Error(`${p}: ${res.status} ${await res.text()}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

interface Window {
  from: number;
  to: number;
  /** /readyz answers of every HTTP process while it lasted. */
  ready: number[];
}

/**
 * Twelve seconds of traffic with `outage` striking at its chosen moments; then
 * waits until everything has settled and checks what must hold.
 */
async function trafficThrough(
  w: World,
  served: Served[],
  outage: (watch: (fn: () => Promise<void>) => Promise<Window>) => Promise<Window[]>,
) {
  const apiUrl = served.find((s) => s.apiUrl)!.apiUrl!;
  const ingestUrl = served.find((s) => s.ingestUrl)!.ingestUrl!;
  const httpUrls = served.flatMap((s) => [s.apiUrl, s.ingestUrl].filter((u): u is string => u !== null));
  w.sim.setWebhookUrl(`${ingestUrl}/webhooks/telnyx`);

  const watch = async (fn: () => Promise<void>): Promise<Window> => {
    const window: Window = { from: Date.now(), to: 0, ready: [] };
    let on = true;
    const polling = (async () => {
      while (on) {
        for (const u of httpUrls)
          window.ready.push(
            await fetch(`${u}/readyz`).then(
              (r) => r.status,
              () => 0,
            ),
          );
        await new Promise((r) => setTimeout(r, 200));
      }
    })();
    await fn();
    window.to = Date.now();
    on = false;
    await polling;
    return window;
  };

  const inbound: string[] = [];
  const outbound: string[] = [];
  const prefix = `+1415${String(Math.floor(Math.random() * 900) + 100)}`;
  const load = (async () => {
    const callId = await create(apiUrl, w.apiKey, '/v1/calls', { from: OUR, to: RING, ring_timeout_secs: 5 });
    for (let i = 0; i < 40; i++) {
      const from = `${prefix}${String(i).padStart(4, '0')}`;
      inbound.push(from);
      w.sim.injectInboundSms({ from, to: OUR, text: `inbound ${i}` });
      if (i % 3 === 0)
        outbound.push(await create(apiUrl, w.apiKey, '/v1/messages', { from: OUR, to: DELIVERED, body: `out ${i}` }));
      await new Promise((r) => setTimeout(r, 300));
    }
    return callId;
  })();
  const windows = await outage(watch);
  const callId = await load;

  // Everything settles: the carrier is idle, every outbound message and the call reached their end.
  const waiting = `SELECT 'message' AS kind, id, status FROM messages WHERE direction = 'outbound' AND status NOT IN ('delivered', 'failed')
     UNION ALL SELECT 'call', id, status FROM calls WHERE ended_at IS NULL
     UNION ALL SELECT 'carrier event', id, event_type FROM carrier_events WHERE processed_at IS NULL`;
  await eventually(
    async () => {
      await w.sim.idle();
      return (await count(w.db, waiting)) === 0;
    },
    SETTLE_MS,
    500,
  ).catch(async (err: Error) => {
    // What is still waiting, and the jobs that should be moving it, say why.
    const still = (await w.db.query(waiting)).rows;
    const jobs = (
      await w.db.query('SELECT id, task_identifier, attempts, run_at, locked_at, locked_by FROM graphile_worker.jobs')
    ).rows;
    throw new Error(`${err.message}: still waiting ${JSON.stringify(still)}; jobs ${JSON.stringify(jobs)}`);
  });

  // No process exited, and every one is ready again.
  for (const s of served) expect(s.alive(), s.proc.output().slice(-3000)).toBe(true);
  for (const u of httpUrls) expect((await fetch(`${u}/readyz`)).status).toBe(200);
  // While the database was away, /readyz said so, and ingest never answered 2xx.
  const longest = windows.reduce((a, b) => (b.to - b.from > a.to - a.from ? b : a));
  expect(longest.ready.some((s) => s === 503)).toBe(true);
  for (const win of windows) {
    const during = w.sim.webhooks.filter((h) => Date.parse(h.at) > win.from + 300 && Date.parse(h.at) < win.to);
    expect(during.filter((h) => h.status !== null && h.status >= 200 && h.status < 300)).toEqual([]);
  }
  expect(w.sim.webhooks.some((h) => h.status === 503)).toBe(true);
  // Never a 2xx for an event that is not stored.
  const stored = new Set(
    (await w.db.query<{ id: string }>('SELECT carrier_event_id AS id FROM carrier_events')).rows.map((r) => r.id),
  );
  expect(w.sim.webhooks.filter((h) => h.status === 200 && h.eventId && !stored.has(h.eventId))).toEqual([]);

  // Every outbound message: delivered once, announced once per transition, billed once.
  const { rows: out } = await w.db.query(
    `SELECT m.id, m.status, (SELECT array_agg(type ORDER BY type) FROM outbound_events e WHERE e.subject_id = m.id) AS events,
            (SELECT count(*)::int FROM usage_records u WHERE u.source_id = m.id) AS bills
       FROM messages m WHERE m.id = ANY ($1)`,
    [outbound],
  );
  expect(out).toHaveLength(outbound.length);
  for (const m of out)
    expect(m).toMatchObject({ status: 'delivered', events: ['message.delivered', 'message.sent'], bills: 1 });
  // The call: it rang on past the first target, was answered and completed, billed once.
  const { rows: calls } = await w.db.query(
    `SELECT c.status, (SELECT array_agg(type ORDER BY type) FROM outbound_events e WHERE e.subject_id = c.id) AS events,
            (SELECT count(*)::int FROM usage_records u WHERE u.source_id = c.id) AS bills FROM calls c WHERE c.id = $1`,
    [callId],
  );
  expect(calls[0]).toMatchObject({ status: 'completed', events: ['call.answered', 'call.completed'], bills: 1 });
  // Every inbound SMS the carrier got a 2xx for is one message with one event; the rest the carrier gave up on.
  const { rows: inbox } = await w.db.query(
    `SELECT m.from_number, count(*)::int AS n, sum((SELECT count(*) FROM outbound_events e WHERE e.subject_id = m.id))::int AS events
       FROM messages m WHERE m.from_number = ANY ($1) GROUP BY m.from_number`,
    [inbound],
  );
  const attemptsFrom = (from: string) =>
    w.sim.webhooks.filter((h) => h.eventType === 'message.received' && h.body.includes(`"${from}"`));
  const acknowledged = inbound.filter((from) => attemptsFrom(from).some((h) => h.status === 200));
  const inboxFrom = inbox.map((m) => m.from_number as string);
  expect(acknowledged.filter((from) => !inboxFrom.includes(from))).toEqual([]);
  // A commit whose answer the cut took is stored with no 2xx to show for it: the carrier's
  // retries met the outage (it lasts longer than their backoff) and it gave up. Such a
  // message is one message all the same; any other message without a 2xx is a fault.
  for (const from of inboxFrom.filter((f) => !acknowledged.includes(f))) {
    const attempts = attemptsFrom(from);
    expect({
      from,
      attempts: attempts.length > 0,
      answered: attempts.filter((h) => h.status !== null && h.status < 500).length,
      stored: attempts.every((h) => h.eventId !== null && stored.has(h.eventId)),
    }).toEqual({ from, attempts: true, answered: 0, stored: true });
  }
  expect(inbox.filter((m) => m.n !== 1 || m.events !== 1)).toEqual([]);
  expect(acknowledged.length).toBeGreaterThan(inbound.length / 2);

  const audit = await runAudit(w.db, { graceSeconds: 0, reconcile: RECONCILE });
  expect(audit.checks.filter((c) => c.violations > 0)).toEqual([]);
}

/** Cuts every connection for `ms`, at a random moment in [atMs, atMs + 1000). */
const cutFor = (w: World, atMs: number, ms: number) => async (watch: (fn: () => Promise<void>) => Promise<Window>) => {
  await new Promise((r) => setTimeout(r, atMs + Math.random() * 1000));
  return watch(async () => {
    w.proxy.cut();
    await new Promise((r) => setTimeout(r, ms));
    w.proxy.restore();
  });
};

const oneThenFive = (w: World) => async (watch: (fn: () => Promise<void>) => Promise<Window>) => {
  const first = await cutFor(w, 2000, 1000)(watch);
  const second = await cutFor(w, 1500, 5000)(watch);
  return [first, second];
};

describe('database outages under traffic', () => {
  it('all roles in one process: connections cut for 1 s, then 5 s, at random moments', {
    timeout: TRAFFIC_TEST_MS,
  }, async () => {
    const w = await world();
    try {
      await trafficThrough(w, [await serve(w, 'ingest,api,worker')], oneThenFive(w));
    } finally {
      await w.sim.close();
      await w.proxy.close();
      await w.db.end();
    }
  });

  it('each role in its own process (ingest, api, worker): the same cuts', { timeout: TRAFFIC_TEST_MS }, async () => {
    const w = await world();
    try {
      const served = await Promise.all([serve(w, 'ingest'), serve(w, 'api'), serve(w, 'worker')]);
      await trafficThrough(w, served, oneThenFive(w));
    } finally {
      await w.sim.close();
      await w.proxy.close();
      await w.db.end();
    }
  });

  it('PostgreSQL itself restarted (fast shutdown, start) in the middle of the traffic', {
    timeout: TRAFFIC_TEST_MS,
  }, async () => {
    const w = await world();
    try {
      await trafficThrough(w, [await serve(w, 'ingest,api,worker')], async (watch) => {
        await new Promise((r) => setTimeout(r, 3000));
        return [
          await watch(async () => {
            await server.stop();
            await new Promise((r) => setTimeout(r, 2000));
            server = await startEmbeddedPostgres({ stateDir, log, durable: false, maxConnections: 300 });
          }),
        ];
      });
    } finally {
      await w.sim.close();
      await w.proxy.close();
      await w.db.end();
    }
  });

  it('a process started while the database is down waits for it, then serves', async () => {
    const w = await world();
    try {
      w.proxy.cut();
      const s = await import('../support/process.js').then(({ spawnHandset }) =>
        spawnHandset(['serve', '--roles', 'api,worker'], {
          HANDSET_HOST: '127.0.0.1',
          HANDSET_API_PORT: '0',
          ...w.env,
        }),
      );
      procs.push(s);
      await s.waitFor(/database unavailable; waiting to apply migrations/, 20_000);
      await new Promise((r) => setTimeout(r, 2000));
      expect(s.child.exitCode).toBeNull();
      w.proxy.restore();
      await s.waitFor(/worker running/, 30_000);
      expect(s.child.exitCode).toBeNull();
    } finally {
      await w.sim.close();
      await w.proxy.close();
      await w.db.end();
    }
  });
});
