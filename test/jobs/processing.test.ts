// Processing: a stored carrier event reaches its handler in one transaction with
// processed_at; failures retry with backoff and leave their error.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { retryPolicies } from '../../src/jobs/retry.js';
import { NotReadyError, processCarrierEvent, type HandlerRegistry } from '../../src/carrier/process.js';
import type { Platform } from '../../src/platform.js';
import { createLogger } from '../../src/telemetry/log.js';
import { envelope, fixture, postWebhook, telnyxKeys, telnyxCarriers } from '../support/carrier.js';
import { createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';

const keys = telnyxKeys();
const notReady = retryPolicies(3000).notReady;
let db: TestDatabase;
let platform: Platform;
let url: string;
const seen: string[] = [];
let failuresLeft = 1;

const handlers: HandlerRegistry = {
  'message.receipt': async (tx, event, ctx) => {
    seen.push(`${event.carrierStatus}:${ctx.carrierEventId}`);
    await tx.query('CREATE TABLE IF NOT EXISTS effects (event text)');
    await tx.query('INSERT INTO effects VALUES ($1)', [ctx.carrierEventId]);
    if (event.carrierStatus === 'delivery_failed' && failuresLeft-- > 0) throw new Error('the downstream row is busy');
    return { outcome: 'applied' };
  },
};

const row = async (carrierEventId: string) =>
  (await db.pool.query('SELECT processed_at, error FROM carrier_events WHERE carrier_event_id = $1', [carrierEventId]))
    .rows[0];

beforeAll(async () => {
  db = await createTestDatabase();
  platform = await startTestPlatform({ databaseUrl: db.url, keys, handlers });
  url = `${platform.ingestUrl}/webhooks/telnyx`;
});
afterAll(async () => {
  await platform.stop();
  await db.drop();
});

describe('processing', () => {
  it('an event reaches its handler once and is marked processed', async () => {
    expect((await postWebhook(url, keys, fixture('message-finalized-delivered'))).status).toBe(200);
    const r = await eventually(
      async () =>
        (await row('4ee8c3a6-4995-4309-a3c6-38e3db9ea4be'))?.processed_at &&
        row('4ee8c3a6-4995-4309-a3c6-38e3db9ea4be'),
    );
    expect(r.error).toBeNull();
    expect(seen).toContain('delivered:4ee8c3a6-4995-4309-a3c6-38e3db9ea4be');
  });

  it('an unknown event type is stored and marked processed with no effect', async () => {
    expect((await postWebhook(url, keys, fixture('call-machine-detection-ended'))).status).toBe(200);
    const r = await eventually(
      async () =>
        (await row('0ccc7b54-4df3-4bca-a65a-3da1ecc777f0'))?.processed_at &&
        row('0ccc7b54-4df3-4bca-a65a-3da1ecc777f0'),
    );
    expect(r.error).toBeNull();
  });

  it('a handler that throws is rolled back, its error recorded, and the event retried until it applies', async () => {
    expect((await postWebhook(url, keys, fixture('message-finalized-failed'))).status).toBe(200);
    const id = '6f1c8a52-2a4e-4b0b-9d0e-4a1f2d3c4b5a';
    await eventually(async () => (await row(id))?.error?.includes('the downstream row is busy'));
    expect((await row(id)).processed_at).toBeNull();
    // the processing policy's first retry comes a second later
    const done = await eventually(async () => (await row(id))?.processed_at && row(id), 15_000);
    expect(done.error).toBeNull();
    expect(seen.filter((s) => s.endsWith(id))).toHaveLength(2);
    // the failed attempt's effect rolled back with it
    expect((await db.pool.query('SELECT count(*)::int AS n FROM effects WHERE event = $1', [id])).rows[0].n).toBe(1);
  });

  it('a known event type missing a field it needs is rejected: processed, with the reason, never retried', async () => {
    const body = envelope('broken-receipt', 'message.finalized', { id: 'x', to: 'not-a-list' });
    expect((await postWebhook(url, keys, body)).status).toBe(200);
    const r = await eventually(async () => (await row('broken-receipt'))?.processed_at && row('broken-receipt'));
    expect(r.error).toMatch(/^malformed: payload.to/);
  });

  it('a re-run after the processing transaction committed does nothing', async () => {
    const deps = {
      pool: db.pool,
      carriers: telnyxCarriers(),
      handlers,
      log: createLogger('silent'),
      notReady,
    };
    const { rows } = await db.pool.query(
      `SELECT id FROM carrier_events WHERE carrier_event_id = '4ee8c3a6-4995-4309-a3c6-38e3db9ea4be'`,
    );
    const before = seen.length;
    expect(await processCarrierEvent(deps, rows[0].id)).toBe('already_processed');
    expect(seen.length).toBe(before);
  });

  it('an event whose row never appears waits by time, not by attempts, then is given up and recorded', async () => {
    const waiting: HandlerRegistry = {
      'message.receipt': async (tx, _ev, ctx) => {
        await tx.query(`CREATE TABLE IF NOT EXISTS partial (v text); INSERT INTO partial VALUES ('half-done')`);
        if (!ctx.waitedOut) throw new NotReadyError('no message with carrier id x');
        return { outcome: 'rejected', reason: 'no message has carrier id x' };
      },
    };
    // A database of its own, with no relay: the runs below, at the times they give, are the only ones.
    const quiet = await createTestDatabase();
    const early = async () =>
      (await quiet.pool.query(`SELECT processed_at, error FROM carrier_events WHERE carrier_event_id = 'early'`))
        .rows[0];
    const { rows } = await quiet.pool.query(
      `INSERT INTO carrier_events (carrier_event_id, event_type, payload) VALUES ('early', 'message.finalized', $1::jsonb) RETURNING id, created_at`,
      [fixture('message-finalized-delivered')],
    );
    const at = (ms: number) => () => new Date(rows[0].created_at.getTime() + ms);
    const deps = (now: () => Date) => ({
      pool: quiet.pool,
      carriers: telnyxCarriers(),
      handlers: waiting,
      log: createLogger('silent'),
      notReady,
      now,
    });
    // However many times it has run, an event younger than the policy's bound waits…
    expect(await processCarrierEvent(deps(at(0)), rows[0].id, 1)).toBe('waiting');
    expect(await processCarrierEvent(deps(at(notReady.giveUpAfterMs! - 1)), rows[0].id, 40)).toBe('waiting');
    expect((await early()).error).toMatch(/^waiting: no message/);
    // Each wait is counted on the row and holds it back by the policy's delay for that attempt.
    const next = await quiet.pool.query(`SELECT attempts, run_after FROM carrier_events WHERE id = $1`, [rows[0].id]);
    expect(next.rows[0]).toEqual({
      attempts: 2,
      run_after: new Date(rows[0].created_at.getTime() + notReady.giveUpAfterMs! - 1 + notReady.maxDelayMs),
    });
    // … and the handler's writes before it threw are gone with its transaction.
    expect((await quiet.pool.query(`SELECT to_regclass('partial') AS t`)).rows[0].t).toBeNull();
    // Once it has waited the bound out, the handler stops waiting: here it gives up.
    expect(await processCarrierEvent(deps(at(notReady.giveUpAfterMs!)), rows[0].id, 2)).toBe('rejected');
    expect((await early()).error).toBe('no message has carrier id x');
    await quiet.drop();
  });
});
