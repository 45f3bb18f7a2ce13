// A Handset webhook receiver that does everything once, however often and in
// whatever order Handset delivers: @handset/inbox on node:http and PostgreSQL.
//
// What it keeps, in its own database:
//   balances       per account: SMS segments billed (one per segment of each message.sent) and events handled
//   messages_seen  per message: its latest status and sequence, and how many events about it were handled
// Every write goes through `tx`, the transaction that also remembers the event id: a redelivery, a
// recover, a retry after a lost 2xx or a crash between commit and answer changes nothing twice.
//
// Configuration: DATABASE_URL, HANDSET_WEBHOOK_SECRET (comma-separated during a rotation), PORT
// (default 4000). Beside a running `handset dev` with those unset, dev.js fills them in.

import http from 'node:http';
import { createInbox } from '@handset/inbox';
import pg from 'pg';
import { settings } from './dev.js';

const config = await settings(process.env);
const pool = new pg.Pool({ connectionString: config.databaseUrl, max: 20 });
pool.on('error', (err) => console.error('database connection lost:', err.message));

await pool.query(`
  CREATE TABLE IF NOT EXISTS balances (
    account_id text PRIMARY KEY,
    sms_segments bigint NOT NULL DEFAULT 0,
    events bigint NOT NULL DEFAULT 0
  );
  CREATE TABLE IF NOT EXISTS messages_seen (
    message_id text PRIMARY KEY,
    status text NOT NULL,
    sequence bigint NOT NULL,
    events int NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
  )`);

const inbox = createInbox({
  pool,
  secret: config.secrets,
  // Billing must see every message.sent even when a later event overtook it: deliver stale
  // events too, and let only the fresh ones move a message's status.
  ordering: 'deliver-stale',
  onOutcome: (o) =>
    console.log(
      `${new Date().toISOString().slice(11, 23)}  ${String(o.status)} ${o.result.padEnd(17)} ${o.eventId ?? ''}`,
    ),
});
await inbox.migrate();

/** @type {import('@handset/inbox').Handler<pg.PoolClient>} */
async function handle(event, tx) {
  const data = /** @type {{ id: string, status?: string, sequence?: number, segments?: number }} */ (event.data);
  const segments = event.type === 'message.sent' ? (data.segments ?? 1) : 0;
  await tx.query(
    `INSERT INTO balances (account_id, sms_segments, events) VALUES ($1, $2, 1)
     ON CONFLICT (account_id) DO UPDATE SET sms_segments = balances.sms_segments + $2, events = balances.events + 1`,
    [event.account_id, segments],
  );
  if (event.type.startsWith('message.')) {
    await tx.query(
      `INSERT INTO messages_seen (message_id, status, sequence, events) VALUES ($1, $2, $3, 1)
       ON CONFLICT (message_id) DO UPDATE SET
         events = messages_seen.events + 1,
         status = CASE WHEN $4 THEN messages_seen.status ELSE EXCLUDED.status END,
         sequence = CASE WHEN $4 THEN messages_seen.sequence ELSE EXCLUDED.sequence END,
         updated_at = now()`,
      [data.id, data.status ?? event.type.slice('message.'.length), data.sequence ?? 0, event.stale],
    );
  }
}

const webhooks = inbox.nodeHandler(handle);
const server = http.createServer((req, res) => {
  if (req.method === 'POST' && req.url === '/webhooks') return webhooks(req, res);
  res.writeHead(404, { 'content-type': 'text/plain' }).end('POST /webhooks\n');
});
await new Promise((resolve) => server.listen(config.port, '127.0.0.1', () => resolve(undefined)));
const address = /** @type {import('node:net').AddressInfo} */ (server.address());
console.log(`inbox-receiver listening on http://127.0.0.1:${address.port}/webhooks`);
await config.ready();

for (const signal of /** @type {const} */ (['SIGINT', 'SIGTERM'])) {
  process.once(signal, async () => {
    server.close();
    await config.stopped();
    await pool.end();
    console.log('stopped');
    process.exit(0);
  });
}
