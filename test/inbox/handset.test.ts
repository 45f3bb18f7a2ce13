// @handset/inbox behind Handset's own deliveries: an answer lost after the
// receiver committed comes back as a retry that is a duplicate; a secret rotation
// keeps every receiver verifying while it switches; `handset listen --forward-to`
// hands an inbox-backed app the bytes and headers Handset signed.

import { mkdtemp, rm } from 'node:fs/promises';
import type http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createInbox, type Inbox, type InboxEvent, type Outcome } from '../../packages/inbox/src/index.js';
import { withTx } from '../../src/db/tx.js';
import { runListen } from '../../src/dev/listen.js';
import { emit } from '../../src/outbox/outbox.js';
import type { Platform } from '../../src/platform.js';
import { createAccount, type ApiClient } from '../support/api.js';
import { createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';
import {
  customerDatabase,
  effects,
  recordEffect,
  serve,
  type CustomerDatabase,
} from '../../packages/inbox/test/support.js';

let db: TestDatabase;
let customer: CustomerDatabase;
let platform: Platform;
let acme: ApiClient;
const closers: (() => Promise<unknown>)[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  customer = await customerDatabase();
  platform = await startTestPlatform({
    databaseUrl: db.url,
    roles: ['api', 'worker'],
    env: { HANDSET_DELIVERY_RETRY_SCHEDULE: '300ms,500ms,1s', HANDSET_DELIVERY_TIMEOUT: '3s' },
  });
  acme = await createAccount(db.pool, platform.apiUrl!, 'Acme');
});
afterAll(async () => {
  for (const close of closers.reverse()) await close();
  await platform.stop();
  await customer.drop();
  await db.drop();
});

async function emitted(subject: string, sequence = 1): Promise<string> {
  return withTx(db.pool, async (tx) => {
    const { eventId } = await emit(tx, {
      accountId: acme.accountId,
      tenantId: null,
      type: 'message.delivered',
      subjectId: subject,
      data: { id: subject, status: 'delivered', sequence },
      occurredAt: new Date(),
    });
    return eventId;
  });
}

async function delivery(eventId: string): Promise<{ status: string; attempts: number }> {
  const { rows } = await db.pool.query('SELECT status, attempts FROM webhook_deliveries WHERE event_id = $1', [
    eventId,
  ]);
  return rows[0];
}

async function subscribe(url: string): Promise<{ id: string; secret: string }> {
  const res = await acme.post('/v1/webhook_endpoints', { url });
  expect(res.status).toBe(201);
  return { id: res.json.id, secret: res.json.secret };
}

async function unsubscribe(id: string): Promise<void> {
  await acme.delete(`/v1/webhook_endpoints/${id}`);
}

/** A receiver whose answer the test can intercept: it runs receive() itself, then answers. */
async function receiverWith(
  inboxOf: () => Inbox<pg.PoolClient>,
  beforeAnswer: (outcome: Outcome) => void = () => {},
): Promise<{ url: string; outcomes: string[] }> {
  const outcomes: string[] = [];
  const served = await serve(async (req: http.IncomingMessage, res: http.ServerResponse) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const outcome = await inboxOf().receive({ body: Buffer.concat(chunks), headers: req.headers }, recordEffect);
    outcomes.push(outcome.result);
    beforeAnswer(outcome);
    res.writeHead(outcome.status).end(outcome.result);
  });
  closers.push(() => served.close());
  return { url: served.url, outcomes };
}

describe('behind Handset’s deliveries', () => {
  it('the 2xx lost after the commit (the connection cut before the answer): the retry is a duplicate, one effect', async () => {
    let inbox: Inbox<pg.PoolClient> | null = null;
    let proxy: TcpProxy | null = null;
    let cutOnce = true;
    const receiver = await receiverWith(
      () => inbox!,
      () => {
        if (!cutOnce) return;
        cutOnce = false;
        // Committed; now the answer never reaches Handset.
        proxy!.cut();
        proxy!.restore();
      },
    );
    const target = new URL(receiver.url);
    proxy = await startTcpProxy('127.0.0.1', Number(target.port));
    closers.push(() => proxy!.close());
    const endpoint = await subscribe(`http://127.0.0.1:${proxy.port}/webhooks`);
    inbox = createInbox({ pool: customer.pool, secret: endpoint.secret, onError: () => {} });
    await inbox.migrate();
    const eventId = await emitted('msg_lost_answer');
    const done = await eventually(async () => {
      const d = await delivery(eventId);
      return d?.status === 'succeeded' && d;
    });
    expect(done.attempts).toBe(2);
    expect(receiver.outcomes).toEqual(['handled', 'duplicate']);
    expect(await effects(customer.pool, eventId)).toBe(1);
    await unsubscribe(endpoint.id);
  });

  it('rotate_secret: the receiver still on the old secret verifies, switches to the new one without a gap, and a redelivery is a duplicate', async () => {
    let inbox: Inbox<pg.PoolClient> | null = null;
    const receiver = await receiverWith(() => inbox!);
    const endpoint = await subscribe(receiver.url);
    inbox = createInbox({ pool: customer.pool, secret: endpoint.secret, onError: () => {} });
    await inbox.migrate();
    const before = await emitted('msg_rotation', 1);
    await eventually(async () => (await delivery(before))?.status === 'succeeded');

    const rotated = await acme.post(`/v1/webhook_endpoints/${endpoint.id}/rotate_secret`);
    expect(rotated.status).toBe(200);
    const newSecret: string = rotated.json.secret;
    expect(newSecret).not.toBe(endpoint.secret);
    const during = await emitted('msg_rotation', 2);
    await eventually(async () => (await delivery(during))?.status === 'succeeded');

    inbox = createInbox({ pool: customer.pool, secret: newSecret, onError: () => {} });
    const after = await emitted('msg_rotation', 3);
    await eventually(async () => (await delivery(after))?.status === 'succeeded');
    expect((await acme.post(`/v1/events/${before}/redeliver`)).status).toBe(202);
    await eventually(async () => receiver.outcomes.length === 4);
    expect(receiver.outcomes).toEqual(['handled', 'handled', 'handled', 'duplicate']);
    for (const id of [before, during, after]) expect(await effects(customer.pool, id)).toBe(1);
    await unsubscribe(endpoint.id);
  });

  it('handset listen --forward-to an inbox-backed app: handled as Handset signed it; the redelivery is a duplicate', async () => {
    const stateDir = await mkdtemp(path.join(tmpdir(), 'handset-listen-inbox-'));
    closers.push(() => rm(stateDir, { recursive: true, force: true }));
    let inbox: Inbox<pg.PoolClient> | null = null;
    const handled: InboxEvent[] = [];
    const outcomes: string[] = [];
    const app = await serve(async (req, res) => {
      await inbox!.nodeHandler(async (event, tx) => {
        handled.push(event);
        await recordEffect(event, tx);
      })(req, res);
    });
    closers.push(() => app.close());
    let stop!: () => void;
    const stopped = new Promise<void>((r) => {
      stop = r;
    });
    const lines: string[] = [];
    const ready = new Promise<string>((resolve) => {
      const listening = runListen(
        { forwardTo: app.url, apiUrl: platform.apiUrl!, apiKey: acme.key, port: 0 },
        stateDir,
        {
          out: (line) => {
            lines.push(line);
            const secret = /signing secret is (whsec_\S+)/.exec(line)?.[1];
            if (secret) resolve(secret);
          },
          stopped,
        },
      );
      closers.push(async () => {
        stop();
        await listening;
      });
    });
    const secret = await ready;
    inbox = createInbox({
      pool: customer.pool,
      secret,
      onError: () => {},
      onOutcome: (o) => outcomes.push(o.result),
    });
    const eventId = await emitted('msg_listen');
    await eventually(async () => outcomes.length === 1);
    expect((await acme.post(`/v1/events/${eventId}/redeliver`)).status).toBe(202);
    await eventually(async () => outcomes.length === 2);
    expect(outcomes).toEqual(['handled', 'duplicate']);
    expect(handled.map((e) => [e.id, e.data['id']])).toEqual([[eventId, 'msg_listen']]);
    expect(await effects(customer.pool, eventId)).toBe(1);
    expect(lines.join('\n')).toMatch(/✔ .*message\.delivered .*→ .*\[200\]/);
  });
});
