// The bench's customer receiver, as a process of its own: the same handler and
// transaction twice, under /inbox through @handset/inbox (verify, remember the id,
// advance the subject, then the handler) and under /plain without it (parse, then
// BEGIN, the handler, COMMIT), each on a pool and a port of its own (the load
// generator's requests all go to one path). Says where each listens.
// Environment: DATABASE_URL, BENCH_INBOX_SECRET, BENCH_INBOX_SCHEMA, BENCH_INBOX_POOL.

import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { createInbox, type InboxEvent } from '@handset/inbox';
import pg from 'pg';

const env = process.env;
const schema = env['BENCH_INBOX_SCHEMA'] ?? 'bench_inbox';
const max = Number(env['BENCH_INBOX_POOL'] ?? 40);
const pool = () => {
  const p = new pg.Pool({ connectionString: env['DATABASE_URL'], max });
  p.on('error', () => {});
  return p;
};

/** The customer's handler: one business row per event (and which path ran it, for the bench's count). */
const handler =
  (via: 'inbox' | 'plain') =>
  async (event: Pick<InboxEvent, 'id' | 'data'>, tx: pg.PoolClient): Promise<void> => {
    const data = event.data as { id: string; amount: number };
    await tx.query(`INSERT INTO ${schema}.effects (event_id, subject, amount, via) VALUES ($1, $2, $3, $4)`, [
      event.id,
      data.id,
      data.amount,
      via,
    ]);
  };

const inbox = createInbox({ pool: pool(), secret: env['BENCH_INBOX_SECRET']!, table: `${schema}.handset_inbox` });
await inbox.migrate();
const withInbox = inbox.nodeHandler(handler('inbox'));

const plainPool = pool();
const plain = async (req: http.IncomingMessage, res: http.ServerResponse) => {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const event = JSON.parse(Buffer.concat(chunks).toString('utf8')) as InboxEvent;
  const client = await plainPool.connect();
  try {
    await client.query('BEGIN');
    await handler('plain')(event, client);
    await client.query('COMMIT');
    const body = '{"result":"handled"}';
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length }).end(body);
  } catch {
    await client.query('ROLLBACK').catch(() => undefined);
    res.writeHead(500, { 'content-length': 0 }).end();
  } finally {
    client.release();
  }
};

for (const [name, listener] of [
  ['inbox', withInbox],
  ['plain', plain],
] as const) {
  const server = http.createServer({ keepAliveTimeout: 60_000 }, (req, res) => void listener(req, res));
  server.listen(0, '127.0.0.1', () => {
    const port = (server.address() as AddressInfo).port;
    process.stdout.write(`bench inbox receiver: ${name} listening on http://127.0.0.1:${port}\n`);
  });
}
process.once('SIGTERM', () => process.exit(0));
