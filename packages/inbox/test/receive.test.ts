// The inbox's promise, each rule over real HTTP into a real PostgreSQL with
// deliveries signed by Handset's signer: however often, however concurrently a
// delivery arrives, the handler's writes happen once; what does not verify
// changes nothing; a handler that throws leaves nothing behind.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import { createInbox, type Handler, type Inbox } from '../src/index.js';
import {
  customerDatabase,
  effects,
  gate,
  handsetEvent,
  newEndpointSecret,
  post,
  quietErrors,
  recordEffect,
  remembered,
  serve,
  sign,
  someoneWaitsOnALock,
  type CustomerDatabase,
  type Served,
} from './support.js';

let db: CustomerDatabase;
const secret = newEndpointSecret();
const servers: Served[] = [];

beforeAll(async () => {
  db = await customerDatabase();
  await createInbox({ pool: db.pool, secret }).migrate();
});
afterAll(async () => {
  for (const s of servers) await s.close();
  await db.drop();
});

async function endpoint(
  handler: Handler<pg.PoolClient>,
  options: Partial<Parameters<typeof createInbox>[0]> = {},
): Promise<{ url: string; inbox: Inbox<pg.PoolClient> }> {
  const inbox = createInbox({ pool: db.pool, secret, ...quietErrors, ...options } as never) as Inbox<pg.PoolClient>;
  const served = await serve(inbox.nodeHandler(handler));
  servers.push(served);
  return { url: served.url, inbox };
}

describe('duplicates', () => {
  it('a delivery replayed 10 times, each with a fresh timestamp, runs the handler once: handled, then duplicate ×9', async () => {
    const { url } = await endpoint(recordEffect);
    const event = handsetEvent();
    const results: string[] = [];
    const now = Math.floor(Date.now() / 1000);
    for (let i = 0; i < 10; i++) {
      const answer = await post(url, sign(event, secret, { timestamp: now + i }));
      expect(answer.status).toBe(200);
      results.push(answer.json.result);
    }
    expect(results).toEqual(['handled', ...Array(9).fill('duplicate')]);
    expect(await effects(db.pool, event.id)).toBe(1);
  });

  it('20 copies at the same moment run the handler once: 1 handled, 19 duplicate, no 5xx', async () => {
    const { url } = await endpoint(recordEffect);
    const event = handsetEvent();
    const answers = await Promise.all(Array.from({ length: 20 }, () => post(url, sign(event, secret))));
    expect(answers.map((a) => a.status)).toEqual(Array(20).fill(200));
    const results = answers.map((a) => a.json.result).sort();
    expect(results).toEqual(['handled', ...Array(19).fill('duplicate')].sort());
    expect(await effects(db.pool, event.id)).toBe(1);
  });

  it('a copy arriving while the first is in its handler waits for that commit, then answers duplicate', async () => {
    const hold = gate();
    const entered = gate();
    const order: string[] = [];
    const { url } = await endpoint(async (event, tx) => {
      await recordEffect(event, tx);
      entered.open();
      await hold.promise;
      order.push('first handler returns');
    });
    const event = handsetEvent();
    const first = post(url, sign(event, secret)).then((a) => {
      order.push(`first answered ${a.json.result}`);
      return a;
    });
    // The first transaction holds the uncommitted id; a second copy arrives and blocks on it.
    await entered.promise;
    const copy = post(url, sign(event, secret)).then((a) => {
      order.push(`copy answered ${a.json.result}`);
      return a;
    });
    await someoneWaitsOnALock(db.pool);
    order.push('copy is waiting');
    hold.open();
    const [a, b] = await Promise.all([first, copy]);
    expect([a.status, b.status]).toEqual([200, 200]);
    expect(order.slice(0, 2)).toEqual(['copy is waiting', 'first handler returns']);
    expect(order.slice(2).sort()).toEqual(['copy answered duplicate', 'first answered handled']);
    expect(await effects(db.pool, event.id)).toBe(1);
  });

  it('when the first copy’s handler throws, the copy waiting on it runs the handler: one effect in all', async () => {
    const hold = gate();
    let runs = 0;
    const { url } = await endpoint(async (event, tx) => {
      runs++;
      await recordEffect(event, tx);
      if (runs === 1) {
        await hold.promise;
        throw new Error('the first run fails');
      }
    });
    const event = handsetEvent();
    const first = post(url, sign(event, secret));
    while (runs === 0) await new Promise((r) => setTimeout(r, 5));
    const copy = post(url, sign(event, secret));
    await someoneWaitsOnALock(db.pool);
    hold.open();
    const [a, b] = await Promise.all([first, copy]);
    expect([a.status, a.json.result]).toEqual([500, 'handler_failed']);
    expect([b.status, b.json.result]).toEqual([200, 'handled']);
    expect(runs).toBe(2);
    expect(await effects(db.pool, event.id)).toBe(1);
  });
});

describe('failures', () => {
  it('a handler that throws: 500, neither the id nor its writes kept; the redelivery is handled', async () => {
    let fail = true;
    const { url } = await endpoint(async (event, tx) => {
      await recordEffect(event, tx);
      if (fail) throw new Error('the handler fails');
    });
    const event = handsetEvent();
    const before = await remembered(db.pool);
    const failed = await post(url, sign(event, secret));
    expect([failed.status, failed.json]).toEqual([500, { result: 'handler_failed', event_id: event.id }]);
    expect(await effects(db.pool, event.id)).toBe(0);
    expect(await remembered(db.pool)).toBe(before);
    fail = false;
    const again = await post(url, sign(event, secret));
    expect([again.status, again.json.result]).toEqual([200, 'handled']);
    expect(await effects(db.pool, event.id)).toBe(1);
  });

  it('a handler that catches a failed statement and returns: 500, nothing kept (the transaction was aborted)', async () => {
    const { url } = await endpoint(async (event, tx) => {
      await recordEffect(event, tx);
      await tx.query('SELECT 1/0').catch(() => undefined);
    });
    const event = handsetEvent();
    const answer = await post(url, sign(event, secret));
    expect([answer.status, answer.json.result]).toEqual([500, 'handler_failed']);
    expect(await effects(db.pool, event.id)).toBe(0);
    expect((await db.pool.query('SELECT 1 FROM handset_inbox WHERE event_id = $1', [event.id])).rowCount).toBe(0);
  });

  it('the error of a 500 reaches onError with the event id, never the sender', async () => {
    const seen: { error: unknown; eventId?: string | undefined }[] = [];
    const { url } = await endpoint(
      async () => {
        throw new Error('secret internals');
      },
      { onError: (error, ctx) => seen.push({ error, eventId: ctx.eventId }) },
    );
    const event = handsetEvent();
    const res = await fetch(url, { method: 'POST', ...sign(event, secret) });
    const text = await res.text();
    expect(res.status).toBe(500);
    expect(text).not.toContain('secret internals');
    expect(seen).toHaveLength(1);
    expect(seen[0]!.eventId).toBe(event.id);
    expect(String(seen[0]!.error)).toContain('secret internals');
  });

  it('a copy held past lockTimeoutMs by the first answers 500 before the first commits; one effect, and the retry is a duplicate', async () => {
    const hold = gate();
    const entered = gate();
    const order: string[] = [];
    const { url } = await endpoint(
      async (event, tx) => {
        await recordEffect(event, tx);
        entered.open();
        await hold.promise;
      },
      { lockTimeoutMs: 300 },
    );
    const event = handsetEvent();
    const first = post(url, sign(event, secret)).then((a) => {
      order.push('first');
      return a;
    });
    await entered.promise;
    const copy = await post(url, sign(event, secret));
    order.push('copy');
    hold.open();
    const a = await first;
    expect(order).toEqual(['copy', 'first']);
    expect([copy.status, copy.json.result]).toEqual([500, 'handler_failed']);
    expect([a.status, a.json.result]).toEqual([200, 'handled']);
    const retry = await post(url, sign(event, secret));
    expect(retry.json.result).toBe('duplicate');
    expect(await effects(db.pool, event.id)).toBe(1);
  });
});

describe('verification', () => {
  const noCall = async () => {
    throw new Error('the handler must not be called');
  };

  it('a bad signature, another secret, one changed byte or re-serialised JSON: 401, nothing recorded, no handler', async () => {
    const { url } = await endpoint(noCall);
    const event = handsetEvent({ data: { id: 'msg_x', note: 'spaced  out é', sequence: 1 } });
    const good = sign(event, secret);
    const pretty = JSON.stringify(JSON.parse(good.body), null, 1);
    const tries = {
      'bad signature': { ...good, headers: { ...good.headers, 'webhook-signature': 'v1,AAAA' } },
      'another secret': sign(event, newEndpointSecret()),
      'one changed byte': { ...good, body: good.body.replace('spaced', 'spacee') },
      're-serialised JSON': { ...good, body: pretty },
      'another webhook-id': { ...good, headers: { ...good.headers, 'webhook-id': 'evt_other' } },
      'a v2 signature': {
        ...good,
        headers: { ...good.headers, 'webhook-signature': good.headers['webhook-signature']!.replace('v1,', 'v2,') },
      },
    };
    const before = await remembered(db.pool);
    for (const [name, delivery] of Object.entries(tries)) {
      const a = await post(url, delivery);
      expect({ name, status: a.status, result: a.json.result }).toEqual({
        name,
        status: 401,
        result: 'invalid_signature',
      });
    }
    expect(await remembered(db.pool)).toBe(before);
    expect(await effects(db.pool, event.id)).toBe(0);
  });

  it('a missing webhook-id, -timestamp or -signature, or a timestamp that is not seconds: 401, nothing recorded', async () => {
    const { url } = await endpoint(noCall);
    const event = handsetEvent();
    const good = sign(event, secret);
    const before = await remembered(db.pool);
    for (const name of ['webhook-id', 'webhook-timestamp', 'webhook-signature']) {
      const headers = { ...good.headers };
      delete headers[name];
      const a = await post(url, { body: good.body, headers });
      expect({ name, status: a.status, reason: a.json.reason }).toEqual({
        name,
        status: 401,
        reason: 'missing webhook-id, -timestamp or -signature',
      });
    }
    const iso = await post(url, {
      ...good,
      headers: { ...good.headers, 'webhook-timestamp': new Date().toISOString() },
    });
    expect(iso.status).toBe(401);
    expect(await remembered(db.pool)).toBe(before);
  });

  it('a timestamp 1 s outside the tolerance either way is 401; 1 s inside is accepted; a configured tolerance is honoured', async () => {
    const now = new Date('2030-01-01T00:00:00Z');
    const t = now.getTime() / 1000;
    for (const tolerance of [300, 30]) {
      const { url } = await endpoint(recordEffect, { now: () => now, toleranceSeconds: tolerance });
      const cases: [number, number][] = [
        [-(tolerance + 1), 401],
        [tolerance + 1, 401],
        [-(tolerance - 1), 200],
        [tolerance - 1, 200],
        [-tolerance, 200],
      ];
      for (const [offset, status] of cases) {
        const event = handsetEvent();
        const a = await post(url, sign(event, secret, { timestamp: t + offset }));
        expect({ tolerance, offset, status: a.status }).toEqual({ tolerance, offset, status });
        expect(await effects(db.pool, event.id)).toBe(status === 200 ? 1 : 0);
      }
    }
  });

  it('rotation: a header with two signatures verifies when one matches; with secrets [old, new] either signer is accepted', async () => {
    const old = secret;
    const next = newEndpointSecret();
    const { url: onlyNew } = await endpoint(recordEffect, { secret: next });
    const { url: both } = await endpoint(recordEffect, { secret: [old, next] });
    const e1 = handsetEvent();
    expect((await post(onlyNew, sign(e1, [old, next]))).json.result).toBe('handled');
    const e2 = handsetEvent();
    expect((await post(both, sign(e2, old))).json.result).toBe('handled');
    const e3 = handsetEvent();
    expect((await post(both, sign(e3, next))).json.result).toBe('handled');
    const e4 = handsetEvent();
    expect((await post(onlyNew, sign(e4, old))).status).toBe(401);
  });

  it('a correctly signed body that is not JSON, not a Handset event, or names another event: 400, nothing recorded', async () => {
    const { url } = await endpoint(noCall);
    const before = await remembered(db.pool);
    const cases: [string, string, string][] = [
      ['not JSON', 'evt_a', 'hello'],
      ['an array', 'evt_b', '[1,2]'],
      ['no type', 'evt_c', JSON.stringify({ id: 'evt_c', data: {} })],
      ['no data', 'evt_d', JSON.stringify({ id: 'evt_d', type: 'message.sent' })],
      ['another id in the body', 'evt_e', JSON.stringify(handsetEvent({ id: 'evt_not_e' }))],
      [
        'a string sequence',
        'evt_f',
        JSON.stringify(handsetEvent({ id: 'evt_f', data: { id: 'msg_f', sequence: '3' } })),
      ],
    ];
    for (const [name, id, body] of cases) {
      const a = await post(url, sign(body, secret, { id }));
      expect({ name, status: a.status, result: a.json.result }).toEqual({ name, status: 400, result: 'bad_request' });
    }
    expect(await remembered(db.pool)).toBe(before);
  });
});

describe('receive() directly', () => {
  it('headers as a Fetch Headers or a plain object (any case), the body as string, Buffer, Uint8Array or ArrayBuffer: the same outcome', async () => {
    const inbox = createInbox({ pool: db.pool, secret, ...quietErrors });
    const event = handsetEvent();
    const delivery = sign(event, secret);
    const headerForms = {
      Headers: new Headers(delivery.headers),
      object: delivery.headers,
      'Title-Case': Object.fromEntries(
        Object.entries(delivery.headers).map(([k, v]) => [k.replace(/(^|-)\w/g, (c) => c.toUpperCase()), v]),
      ),
    };
    const bytes = new TextEncoder().encode(delivery.body);
    const bodyForms = {
      string: delivery.body,
      Buffer: Buffer.from(delivery.body),
      Uint8Array: bytes,
      ArrayBuffer: bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength),
    };
    const seen: string[] = [];
    for (const [h, headers] of Object.entries(headerForms)) {
      for (const [b, body] of Object.entries(bodyForms)) {
        const outcome = await inbox.receive({ body, headers }, recordEffect);
        seen.push(`${h}/${b}: ${outcome.status} ${outcome.result}`);
        const tampered = await inbox.receive(
          {
            body:
              typeof body === 'string'
                ? `${body} `
                : Buffer.concat([Buffer.from(body as ArrayBuffer), Buffer.from(' ')]),
            headers,
          },
          recordEffect,
        );
        expect(tampered.status).toBe(401);
      }
    }
    expect(seen).toEqual(seen.map((s, i) => `${s.split(':')[0]}: ${i === 0 ? '200 handled' : '200 duplicate'}`));
    expect(await effects(db.pool, event.id)).toBe(1);
  });

  it('a body a JSON parser already turned into an object is a programming error, said plainly', async () => {
    const inbox = createInbox({ pool: db.pool, secret, ...quietErrors });
    const event = handsetEvent();
    await expect(
      inbox.receive({ body: event as never, headers: sign(event, secret).headers }, recordEffect),
    ).rejects.toThrow(/raw body as received/);
  });

  it('bad options fail at createInbox with what was wrong', () => {
    expect(() => createInbox({ pool: db.pool, secret: '' })).toThrow(/secret/);
    expect(() => createInbox({ pool: db.pool, secret: [] })).toThrow(/secret/);
    expect(() => createInbox({ pool: db.pool, secret, table: 'a;drop' })).toThrow(/table/);
    expect(() => createInbox({ pool: db.pool, secret, table: 'a.b.c' })).toThrow(/table/);
    expect(() => createInbox({ pool: db.pool, secret, ordering: 'newest' as never })).toThrow(/ordering/);
    expect(() => createInbox({ pool: db.pool, secret, toleranceSeconds: -1 })).toThrow(/toleranceSeconds/);
    expect(() => createInbox({ secret } as never)).toThrow(/pool/);
  });
});
