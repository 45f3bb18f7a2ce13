// One resource of every kind for an account, made through the public API where
// the API can make it (tenant, phone number, webhook endpoint, message, call, and
// an event with a delivery: canceling a scheduled message emits message.canceled
// to the endpoint), plus one usage record through the billing ledger. Returns
// every id and secret the account owns, so tests can look for them elsewhere.

import type pg from 'pg';
import { bill } from '../../../src/billing/usage.sql.js';
import { withTx } from '../../../src/db/tx.js';
import type { ApiClient } from '../../support/api.js';
import { count } from '../../support/db.js';

export interface World {
  client: ApiClient;
  accountId: string;
  tenantId: string;
  /** E.164 numbers the account owns. */
  numbers: string[];
  numberId: string;
  endpointId: string;
  endpointSecret: string;
  /** A message still scheduled (cancelable). */
  scheduledMessageId: string;
  /** A canceled message (its cancel emitted eventId). */
  canceledMessageId: string;
  callId: string;
  eventId: string;
  /** A second API key of the account (made through the API) and its secret. */
  apiKeyId: string;
  apiKeySecret: string;
  /** Every id above, by kind. */
  ids: Record<string, string>;
}

function ok(res: { status: number; json: any }, what: string, status = 201) {
  // eslint-disable-line @typescript-eslint/no-explicit-any
  if (res.status !== status)
    throw new Error(`${what}: expected ${status}, got ${res.status} ${JSON.stringify(res.json)}`);
  return res.json;
}

/**
 * `numberBase` is a unique E.164 stem per account, e.g. "+1415555" (numbers are
 * unique across accounts); its numbers are put in `carrier`'s inventory first (a
 * claim is checked there).
 */
export async function seedWorld(
  pool: pg.Pool,
  client: ApiClient,
  numberBase: string,
  endpointUrl: string,
  carrier: { addNumber(number: string): void },
): Promise<World> {
  const tenant = ok(await client.post('/v1/tenants', { name: `tenant of ${client.accountId}` }), 'tenant');
  const numbers = [`${numberBase}0001`, `${numberBase}0002`];
  for (const n of numbers) carrier.addNumber(n);
  const number = ok(
    await client.post('/v1/phone_numbers', {
      number: numbers[0],
      tenant_id: tenant.id,
      inbound_ring: [`${numberBase}0009`],
    }),
    'number',
  );
  ok(await client.post('/v1/phone_numbers', { number: numbers[1] }), 'second number');
  const endpoint = ok(
    await client.post('/v1/webhook_endpoints', { url: endpointUrl, description: `endpoint of ${client.accountId}` }),
    'endpoint',
  );
  const sendAt = new Date(Date.now() + 86_400_000).toISOString();
  const scheduled = ok(
    await client.post('/v1/messages', {
      from: numbers[0],
      to: `${numberBase}0100`,
      body: 'still scheduled',
      send_at: sendAt,
    }),
    'message',
  );
  const toCancel = ok(
    await client.post('/v1/messages', {
      from: numbers[0],
      to: `${numberBase}0101`,
      body: 'to be canceled',
      send_at: sendAt,
    }),
    'message',
  );
  ok(await client.post(`/v1/messages/${toCancel.id}/cancel`), 'cancel', 200);
  const call = ok(
    await client.post('/v1/calls', { from: numbers[0], to: [`${numberBase}0200`, `${numberBase}0201`] }),
    'call',
  );
  const optOut = ok(
    await client.post('/v1/opt_outs', { number: numbers[0], recipient: `${numberBase}0300` }),
    'opt-out',
  );
  // A second one, so a list still has one after a test ends the first.
  const optOut2 = ok(
    await client.post('/v1/opt_outs', { number: numbers[1], recipient: `${numberBase}0301` }),
    'second opt-out',
  );
  const events = ok(await client.get('/v1/events'), 'events', 200);
  const event = events.data.find((e: { type: string }) => e.type === 'message.canceled');
  if (!event) throw new Error(`no message.canceled event: ${JSON.stringify(events)}`);
  const deliveries = await count(pool, 'SELECT * FROM webhook_deliveries WHERE event_id = $1', [event.id]);
  if (deliveries === 0) throw new Error('the event has no delivery');
  await withTx(pool, (tx) =>
    bill(tx, {
      accountId: client.accountId,
      tenantId: tenant.id,
      kind: 'sms_segment_outbound',
      quantity: 3,
      sourceId: scheduled.id,
      occurredAt: new Date(),
    }),
  );
  const apiKey = ok(await client.post('/v1/api_keys', { name: `key of ${client.accountId}` }), 'api key');
  // A recording of the call, with its audio, as the carrier's webhook and the fetch would have left it.
  const recording = await withTx(pool, async (tx) => {
    const { rows } = await tx.query<{ id: string }>(
      `INSERT INTO recordings (account_id, tenant_id, call_id, carrier, carrier_recording_id, carrier_ref, started_at,
                               ended_at, duration_seconds, audio_status)
       VALUES ($1, $2, $3, 'telnyx', $4, $5, now() - interval '1 minute', now(), 60, 'stored') RETURNING id`,
      [client.accountId, tenant.id, call.id, `rec-of-${client.accountId}`, `leg-of-${client.accountId}`],
    );
    await tx.query(`INSERT INTO recording_audio (recording_id, content_type, bytes) VALUES ($1, 'audio/wav', $2)`, [
      rows[0]!.id,
      Buffer.from(`RIFF audio of ${client.accountId}`),
    ]);
    return rows[0]!;
  });
  const ids = {
    tenant: tenant.id as string,
    phone_number: number.id as string,
    webhook_endpoint: endpoint.id as string,
    message: scheduled.id as string,
    canceled_message: toCancel.id as string,
    call: call.id as string,
    event: event.id as string,
    opt_out: optOut.id as string,
    second_opt_out: optOut2.id as string,
    api_key: apiKey.id as string,
    recording: recording.id,
  };
  return {
    client,
    accountId: client.accountId,
    tenantId: tenant.id,
    numbers,
    numberId: number.id,
    endpointId: endpoint.id,
    endpointSecret: endpoint.secret,
    scheduledMessageId: scheduled.id,
    canceledMessageId: toCancel.id,
    callId: call.id,
    eventId: event.id,
    apiKeyId: apiKey.id,
    apiKeySecret: apiKey.secret,
    ids,
  };
}

/**
 * A fingerprint of everything an API request could create or change: every row
 * of every customer-facing table (all accounts), plus the job queue's size.
 */
export async function snapshot(pool: pg.Pool): Promise<string> {
  const tables = [
    'accounts',
    'api_keys',
    'tenants',
    'phone_numbers',
    'messages',
    'message_status_history',
    'calls',
    'call_legs',
    'webhook_endpoints',
    'outbound_events',
    'webhook_deliveries',
    'webhook_attempts',
    'idempotency_keys',
    'usage_records',
    'carrier_events',
  ];
  // A key's last_used_at is the bookkeeping of its own use (written at most once a
  // minute by whoever authenticates with it), not something a request changed.
  const row = (t: string) => (t === 'api_keys' ? `(to_jsonb(x) - 'last_used_at')::text` : 'row_to_json(x)::text');
  const union = tables.map((t) => `SELECT '${t}' || ${row(t)} AS r FROM ${t} x`).join(' UNION ALL ');
  const { rows } = await pool.query<{ h: string; jobs: number }>(
    `SELECT md5(coalesce(string_agg(r, '|' ORDER BY r), '')) AS h,
            (SELECT count(*)::int FROM graphile_worker._private_jobs) AS jobs
       FROM (${union}) s`,
  );
  return `${rows[0]!.h}/${rows[0]!.jobs}`;
}

/**
 * Counts every row written (inserted, updated or deleted) in the public schema
 * and the job queue, from a row trigger installed in this test's own database:
 * a cheap, exact "did this request write anything?" (a rolled-back write rolls
 * its count back too).
 */
export async function installWriteCounter(pool: pg.Pool): Promise<() => Promise<number>> {
  await pool.query(`
    CREATE TABLE IF NOT EXISTS security_writes (n bigint NOT NULL);
    INSERT INTO security_writes SELECT 0 WHERE NOT EXISTS (SELECT FROM security_writes);
    CREATE OR REPLACE FUNCTION security_count_write() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN UPDATE security_writes SET n = n + 1; RETURN NULL; END $$;
  `);
  const { rows } = await pool.query<{ name: string }>(
    `SELECT format('%I.%I', schemaname, tablename) AS name FROM pg_tables
      WHERE (schemaname = 'public' AND tablename <> 'security_writes') OR (schemaname = 'graphile_worker' AND tablename = '_private_jobs')`,
  );
  for (const { name } of rows) {
    // On api_keys, an UPDATE of last_used_at alone is the key's use being recorded (at most once a minute), not a write
    // the request made: every other column counts.
    const updates =
      name === 'public.api_keys'
        ? 'UPDATE OF id, account_id, prefix, secret_hash, name, created_at, expires_at, revoked_at'
        : 'UPDATE';
    await pool.query(
      `CREATE OR REPLACE TRIGGER security_count_write AFTER INSERT OR ${updates} OR DELETE ON ${name} FOR EACH ROW EXECUTE FUNCTION security_count_write()`,
    );
  }
  return async () => Number((await pool.query<{ n: string }>('SELECT n FROM security_writes')).rows[0]!.n);
}
