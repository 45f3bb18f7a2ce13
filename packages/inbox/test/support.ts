// What the inbox's tests share: a customer's own empty database on the suite's
// PostgreSQL, deliveries signed by Handset's own signer, a receiver on real HTTP,
// and the customer's business table (effects: one row per handler run, with no
// unique key, so a second run shows as a second row).

import { randomBytes } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import { inject } from 'vitest';
import { createDatabase, dropDatabase } from '../../../src/db/databases.js';
import { newEndpointSecret, webhookHeaders } from '../../../src/delivery/signature.js';
import type { HandsetEvent, InboxEvent } from '../src/index.js';

export { newEndpointSecret };

export interface CustomerDatabase {
  url: string;
  pool: pg.Pool;
  drop(): Promise<void>;
}

/** An empty database of the test's own, as a customer's would be. */
export async function customerDatabase(max = 30): Promise<CustomerDatabase> {
  const adminUrl = inject('adminUrl');
  const name = `handset_inbox_${inject('templateDb').replace('handset_tpl_', '')}_${randomBytes(4).toString('hex')}`;
  const url = await createDatabase(adminUrl, name);
  const pool = new pg.Pool({ connectionString: url, max });
  // An idle connection the database drops (the test's own DROP DATABASE … FORCE) is no failure.
  pool.on('error', () => {});
  await pool.query(`CREATE TABLE effects (
    event_id text NOT NULL, subject text, sequence bigint, amount int NOT NULL DEFAULT 0, stale boolean NOT NULL DEFAULT false,
    at timestamptz NOT NULL DEFAULT clock_timestamp())`);
  return {
    url,
    pool,
    async drop() {
      await pool.end();
      await dropDatabase(adminUrl, name);
    },
  };
}

/** The business write the tests' handlers make: one row per run. */
export async function recordEffect(event: InboxEvent, tx: pg.PoolClient): Promise<void> {
  const data = event.data as { id?: string; sequence?: number; amount?: number };
  await tx.query('INSERT INTO effects (event_id, subject, sequence, amount, stale) VALUES ($1, $2, $3, $4, $5)', [
    event.id,
    data.id ?? null,
    data.sequence ?? null,
    data.amount ?? 0,
    event.stale,
  ]);
}

export async function effects(pool: pg.Pool, eventId?: string): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM effects${eventId ? ' WHERE event_id = $1' : ''}`,
    eventId ? [eventId] : [],
  );
  return rows[0]!.n;
}

export async function remembered(pool: pg.Pool, table = 'handset_inbox'): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`);
  return rows[0]!.n;
}

let counter = 0;

/** A Handset event: a message's transition unless told otherwise. */
export function handsetEvent(over: Partial<HandsetEvent> & { data?: Record<string, unknown> } = {}): HandsetEvent {
  counter++;
  return {
    id: `evt_${randomBytes(8).toString('hex')}`,
    type: 'message.delivered',
    timestamp: new Date().toISOString(),
    account_id: 'acct_test',
    data: { id: `msg_${counter}_${randomBytes(4).toString('hex')}`, status: 'delivered', sequence: 2 },
    ...over,
  };
}

export interface Delivery {
  body: string;
  headers: Record<string, string>;
}

/** One delivery attempt of `event`, signed as Handset signs it (every secret given, space-separated). */
export function sign(
  event: HandsetEvent | string,
  secrets: string | string[],
  opts: { id?: string; timestamp?: number } = {},
): Delivery {
  const body = typeof event === 'string' ? event : JSON.stringify(event);
  const id = opts.id ?? (typeof event === 'string' ? 'evt_unknown' : event.id);
  const timestamp = opts.timestamp ?? Math.floor(Date.now() / 1000);
  return {
    body,
    headers: {
      'content-type': 'application/json',
      ...webhookHeaders(Array.isArray(secrets) ? secrets : [secrets], id, timestamp, body),
    },
  };
}

export interface Served {
  url: string;
  close(): Promise<void>;
}

export async function serve(listener: http.RequestListener): Promise<Served> {
  const server = http.createServer(listener);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/webhooks`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export interface Answer {
  status: number;
  json: { result: string; event_id?: string; reason?: string };
}

export async function post(
  url: string,
  delivery: Delivery | { body: string | Uint8Array; headers: Record<string, string> },
): Promise<Answer> {
  const res = await fetch(url, { method: 'POST', headers: delivery.headers, body: delivery.body });
  return { status: res.status, json: (await res.json()) as Answer['json'] };
}

/** Resolves when some backend of `pool`'s database is waiting on a lock (a copy blocked on the first one's row). */
export async function someoneWaitsOnALock(pool: pg.Pool, n = 1): Promise<void> {
  for (;;) {
    const { rows } = await pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`,
    );
    if (rows[0]!.n >= n) return;
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** A promise and its resolve, to hold a handler until the test lets it go. */
export function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((r) => {
    open = r;
  });
  return { promise, open };
}

export const quietErrors = { onError: () => {} };
