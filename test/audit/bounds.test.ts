// `handset audit` judges "nothing waits forever" (invariant 7) with the bounds of
// the server that wrote the database, not with its own defaults: `handset serve`
// with default settings waits an hour for a sent message's terminal receipt
// before asking the carrier, so a message sent minutes ago is not overdue. The
// database is written by a real `handset serve` process; its messages are aged
// by moving their timestamps, not by waiting.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runAudit } from '../../src/audit/audit.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { createAccount } from '../support/api.js';
import { createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { runHandset, type Served, serveRoles } from '../support/process.js';

const OUR_NUMBER = '+13125550311';
const SENT_ONLY = '+15555550105'; // the simulator's persona: message.sent, never finalized

let db: TestDatabase;
let sim: Simulator;
let served: Served;
const sent: string[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  sim = await startSimulator({ webhookUrl: null, seed: 'audit-bounds' });
  // Default settings: nothing about reconciliation is configured.
  served = await serveRoles('ingest,api,worker', { DATABASE_URL: db.url, ...sim.carrierEnv(), LOG_LEVEL: 'info' });
  sim.setWebhookUrl(`${served.ingestUrl}/webhooks/telnyx`);
  try {
    const acme = await createAccount(db.pool, served.apiUrl!, 'Bounds');
    expect((await acme.post('/v1/phone_numbers', { number: OUR_NUMBER })).status).toBe(201);
    for (let i = 0; i < 3; i++) {
      const res = await acme.post('/v1/messages', { from: OUR_NUMBER, to: SENT_ONLY, body: `waiting ${i}` });
      expect(res.status).toBe(201);
      sent.push(res.json.id);
    }
    await eventually(
      async () =>
        (await Promise.all(sent.map((id) => acme.get(`/v1/messages/${id}`)))).every((r) => r.json.status === 'sent'),
      30_000,
    );
    // Every carrier event the sends caused is processed before the server stops.
    await eventually(
      async () =>
        (await db.pool.query('SELECT count(*)::int AS n FROM carrier_events WHERE processed_at IS NULL')).rows[0].n ===
        0,
      30_000,
    );
  } finally {
    served.proc.child.kill('SIGTERM');
    await served.proc.exited;
  }
}, 120_000);
afterAll(async () => {
  await sim?.close();
  await db?.drop();
});

/** Moves the messages' timestamps back, as if they had been sent `interval` ago. */
const age = (interval: string) =>
  db.pool.query(
    `UPDATE messages SET created_at = now() - $2::interval, sent_at = now() - $2::interval, checked_at = NULL
      WHERE id = ANY ($1)`,
    [sent, interval],
  );

describe('handset audit against a database written by handset serve with default settings', () => {
  it('messages sent 3 minutes ago without a terminal receipt are not overdue: the server waits an hour; the report names the bounds it used', async () => {
    await age('3 minutes');
    const r = await runHandset(['audit'], { DATABASE_URL: db.url });
    expect(r.output).toContain(
      'no sent message waits past its bound without the carrier asked (checked 3 sent messages): ok',
    );
    expect(r.code).toBe(0);
    expect(r.output).toMatch(
      /recorded by the workers that wrote this database: HANDSET_RECONCILE_INTERVAL 1m, HANDSET_RECONCILE_AFTER 1m, HANDSET_RECONCILE_MESSAGE_AFTER 1h/,
    );
  });

  it('messages sent 2 hours ago without a terminal receipt, never asked about, are overdue by those same bounds', async () => {
    await age('2 hours');
    const r = await runHandset(['audit'], { DATABASE_URL: db.url });
    expect(r.code).toBe(1);
    expect(r.output).toContain(
      `no sent message waits past its bound without the carrier asked (checked 3 sent messages): 3 violations: ${[...sent].sort().join(', ')}`,
    );
  });

  it('with several servers’ bounds recorded, a message is judged by the most lenient in force since it was sent', async () => {
    await age('3 minutes');
    // What the server recorded: its default bounds.
    expect((await runAudit(db.pool)).bounds).toEqual({
      source: 'recorded',
      settings: [expect.objectContaining({ intervalMs: 60_000, afterMs: 60_000, messageAfterMs: 3_600_000 })],
    });
    const messages = async () =>
      (await runAudit(db.pool)).checks.find((c) => c.key === 'messages.not_waiting_forever')!;
    try {
      // A second server that asks after one minute ran a moment ago, and the first one stopped 10 minutes ago:
      // since these messages were sent only the second one could have asked, and it did not.
      await db.pool.query(`UPDATE reconcile_bounds SET last_seen_at = now() - interval '10 minutes'`);
      await db.pool.query(
        `INSERT INTO reconcile_bounds (interval_ms, after_ms, message_after_ms, first_seen_at, last_seen_at)
         VALUES (5000, 10000, 60000, now() - interval '20 minutes', now())`,
      );
      expect((await messages()).violations).toBe(3);
      // Had the first server been running too, its hour applies.
      await db.pool.query(`UPDATE reconcile_bounds SET last_seen_at = now()`);
      expect((await messages()).violations).toBe(0);
      const { bounds } = await runAudit(db.pool);
      expect(bounds.source).toBe('recorded');
      expect(new Set(bounds.settings.map((b) => b.messageAfterMs))).toEqual(new Set([3_600_000, 60_000]));
    } finally {
      await db.pool.query('DELETE FROM reconcile_bounds WHERE interval_ms = 5000');
    }
  });
});
