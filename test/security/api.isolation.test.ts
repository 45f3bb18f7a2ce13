// Isolation between accounts and authentication, generated from the route table
// (the paths of /openapi.json), so a route added tomorrow is covered tomorrow
// (another account's resource is 404, never 403). Alice owns one resource of every
// kind (tenant, phone number, webhook endpoint, message, call, event with a
// delivery, usage); Bob owns the same kinds. Then:
//   - every /v1 path with an {id}, with every HTTP method, answers Bob 404 for
//     each of Alice's real ids, and Bob's attempts write nothing at all;
//   - every list (and every other GET) answers Bob without any trace of Alice,
//     whatever filter or cursor Bob passes, and a filter naming Alice's resource
//     selects nothing;
//   - no /v1 operation answers anything but 401 without a valid Bearer key.

import { afterAll, describe, expect, it } from 'vitest';
import { apiKeyRevoke } from '../../src/accounts/accounts.sql.js';
import { withTx } from '../../src/db/tx.js';
import { createAccount, request } from '../support/api.js';
import { startSimulator } from '../../src/sim/simulator.js';
import { createTestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';
import { exampleOf, isList, operationsOf, pct, type Operation } from './support/openapi.js';
import { rawRequest } from './support/raw-http.js';
import { installWriteCounter, seedWorld, snapshot, type World } from './support/world.js';

const db = await createTestDatabase();
// The carrier a number's claim is checked with.
const sim = await startSimulator({ webhookUrl: null, seed: 'isolation' });
// The per-key rate limit is not what these tests are about: they send hundreds of requests a second.
const platform = await startTestPlatform({
  databaseUrl: db.url,
  roles: ['api'],
  env: { ...sim.carrierEnv(), HANDSET_API_RATE_LIMIT: '1000000', HANDSET_ADDRESS_RATE_LIMIT: '1000000' },
});
const base = platform.apiUrl!;
const operations = operationsOf((await request(base, 'GET', '/openapi.json', null)).json).filter((op) =>
  op.path.startsWith('/v1/'),
);
const alice = await seedWorld(
  db.pool,
  await createAccount(db.pool, base, 'Alice'),
  '+1415666',
  'https://example.com/alice',
  sim,
);
const bob = await seedWorld(
  db.pool,
  await createAccount(db.pool, base, 'Bob'),
  '+1415999',
  'https://example.com/bob',
  sim,
);
const writes = await installWriteCounter(db.pool);

afterAll(async () => {
  await platform.stop();
  await sim.close();
  await db.drop();
});

const aliceIds = Object.values(alice.ids);
/** Everything that would show Bob a trace of Alice. */
const aliceTraces = [
  ...aliceIds,
  alice.accountId,
  ...alice.numbers,
  alice.endpointSecret,
  alice.apiKeySecret,
  alice.client.key,
  'https://example.com/alice',
  'tenant of ' + alice.accountId,
];

const idPaths = [...new Set(operations.filter((op) => op.path.includes('{id}')).map((op) => op.path))];
const METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'];
const opFor = (method: string, path: string) => operations.find((op) => op.method === method && op.path === path);

function send(who: World | string | null, method: string, path: string, body?: unknown) {
  const key = who === null ? null : typeof who === 'string' ? who : who.client.key;
  return request(base, method, path, key, body);
}

const bodyFor = (op: Operation | undefined) => (op?.body ? exampleOf(op.body) : undefined);

describe("another account's ids", () => {
  it('the route table has {id} routes for every kind Alice owns, and each of her ids is real to her', async () => {
    expect(idPaths.length).toBeGreaterThanOrEqual(10);
    // each id kind is readable by its owner on some GET {id} route: the 404s below are about ownership
    const readable = new Set<string>();
    for (const path of idPaths.filter((p) => opFor('GET', p) && p.endsWith('{id}'))) {
      for (const id of aliceIds)
        if ((await send(alice, 'GET', path.replace('{id}', id))).status === 200) readable.add(id);
    }
    expect([...readable].sort()).toEqual([...aliceIds].sort());
  });

  it.each(idPaths)(
    "%s: Bob gets 404 with every method for every one of Alice's ids, and changes nothing",
    async (path) => {
      const beforeWrites = await writes();
      const beforeRows = await snapshot(db.pool);
      const answers: string[] = [];
      for (const method of METHODS) {
        const op = opFor(method, path);
        for (const id of aliceIds) {
          const res = await send(bob, method, path.replace('{id}', pct(id)), bodyFor(op));
          // declared operations must say the resource is not found; undeclared methods, that the route is not
          const expected = op ? 'resource_not_found' : 'route_not_found';
          if (res.status !== 404 || res.json?.code !== expected)
            answers.push(`${method} ${path} with ${id}: ${res.status} ${JSON.stringify(res.json)}`);
        }
      }
      expect(answers).toEqual([]);
      expect(await writes()).toBe(beforeWrites);
      expect(await snapshot(db.pool)).toBe(beforeRows);
    },
  );

  it("the same requests with Bob's own ids are not 404 for at least one id per declared operation (the 404s above are about ownership)", async () => {
    const bobIds = Object.values(bob.ids);
    const missing: string[] = [];
    // DELETE last: it removes what the other operations act on
    const declared = operations
      .filter((op) => op.path.includes('{id}'))
      .sort((a, b) => Number(a.method === 'DELETE') - Number(b.method === 'DELETE'));
    for (const op of declared) {
      let found = false;
      // a DELETE gets a spare of its own, made by POSTing an example to the collection
      const create = opFor('POST', op.path.slice(0, op.path.indexOf('/{id}')));
      const spare =
        op.method === 'DELETE' && create ? (await send(bob, 'POST', create.path, bodyFor(create))).json?.id : undefined;
      for (const id of spare ? [spare] : bobIds) {
        const res = await send(bob, op.method, op.path.replace('{id}', id), bodyFor(op));
        if (res.status !== 404) {
          found = true;
          break;
        }
      }
      if (!found) missing.push(`${op.method} ${op.path}`);
    }
    expect(missing).toEqual([]);
  });
});

describe("references to another account's resources inside a request body", () => {
  const references = operations.flatMap((op) =>
    Object.keys((op.body?.['properties'] ?? {}) as Record<string, unknown>)
      .filter((name) => name.endsWith('_id') || name === 'from')
      .map((name) => [`${op.method} ${op.path} ${name}`, op, name] as const),
  );

  it('the route table has body references to check', () => {
    expect(references.length).toBeGreaterThanOrEqual(3);
  });

  it.each(references)(
    "%s naming one of Alice's resources is refused (404, or 422 for a number Bob does not own) and writes nothing",
    async (_name, op, field) => {
      const before = await writes();
      const wrong: string[] = [];
      for (const value of field === 'from' ? alice.numbers : aliceIds) {
        const body = { ...(exampleOf(op.body!, undefined, true) as Record<string, unknown>), [field]: value };
        if (op.path.includes('{id}')) continue; // bodies on {id} routes are covered with Bob's own ids below
        const res = await send(bob, op.method, op.path, body);
        const ok =
          field === 'from'
            ? res.status === 422 && res.json?.code === 'from_not_owned'
            : res.status === 404 && res.json?.code === 'resource_not_found';
        if (!ok) wrong.push(`${JSON.stringify(body)}: ${res.status} ${JSON.stringify(res.json)}`);
      }
      expect(wrong).toEqual([]);
      expect(await writes()).toBe(before);
    },
  );
});

describe('lists and other reads', () => {
  const reads = operations.filter((op) => op.method === 'GET' && !op.path.includes('{'));

  it('every list route shows Bob his own resources (so the checks below are not vacuous)', async () => {
    const bobIds = new Set(Object.values(bob.ids));
    const empty: string[] = [];
    for (const op of reads.filter(isList)) {
      const res = await send(bob, 'GET', `${op.path}?limit=100`);
      if (!res.json.data.some((r: { id: string }) => bobIds.has(r.id))) empty.push(op.path);
    }
    expect(empty).toEqual([]);
  });

  it.each(reads.map((op) => [op.path, op] as const))(
    "%s: never shows Bob a trace of Alice, with every filter value and Alice's ids as cursor or filter",
    async (_path, op) => {
      const all = op.parameters.some((x) => x.name === 'limit') ? 'limit=100' : 'from=2000-01-01T00:00:00Z';
      const queries: string[][] = [[all]];
      for (const p of op.parameters.filter((x) => x.in === 'query' && x.name !== 'limit')) {
        // A filter with a pattern (a phone number) gets Alice's values of that shape: others are a 422.
        const pattern = typeof p.schema['pattern'] === 'string' ? new RegExp(p.schema['pattern']) : null;
        const values: unknown[] = Array.isArray(p.schema['enum'])
          ? (p.schema['enum'] as unknown[])
          : p.schema['type'] === 'string' && !p.schema['format']
            ? pattern
              ? aliceTraces.filter((t) => pattern.test(t))
              : aliceIds
            : [];
        for (const v of values) queries.push([all, `${p.name}=${pct(String(v))}`]);
      }
      const leaks: string[] = [];
      for (const q of queries) {
        const res = await send(bob, 'GET', `${op.path}?${q.join('&')}`);
        // Another account's id as the cursor is no item of Bob's list: 404, like an unknown one.
        const cursorRefused =
          q[1]?.startsWith('starting_after=') && res.status === 404 && res.json?.code === 'resource_missing';
        if (res.status !== 200 && !cursorRefused)
          leaks.push(`${q.join('&')}: ${res.status} ${JSON.stringify(res.json)}`);
        const text = JSON.stringify(res.json);
        const seen = aliceTraces.filter((t) => text.includes(t));
        if (seen.length > 0) leaks.push(`${q.join('&')}: shows ${seen.join(', ')}`);
        // a filter (not the cursor) that names one of Alice's resources must select nothing of Bob's either
        const filter = q[1]?.split('=')[0];
        if (
          filter &&
          filter !== 'starting_after' &&
          aliceTraces.includes(decodeURIComponent(q[1]!.split('=')[1]!)) &&
          res.json?.data?.length > 0
        ) {
          leaks.push(`${q.join('&')}: selects ${JSON.stringify(res.json.data)}`);
        }
      }
      expect(leaks).toEqual([]);
    },
  );
});

const revokedKey = await (async () => {
  const revoked = await createAccount(db.pool, base, 'Revoked');
  const { rows } = await db.pool.query<{ id: string }>('SELECT id FROM api_keys WHERE account_id = $1', [
    revoked.accountId,
  ]);
  await withTx(db.pool, (tx) => apiKeyRevoke(tx, revoked.accountId, rows[0]!.id));
  return revoked.key;
})();

describe('authentication', () => {
  const key = alice.client.key;
  const flip = (c: string) => (c === 'A' ? 'B' : 'A');
  const CREDENTIALS: [string, string | null][] = [
    ['no authorization header', null],
    ['an empty header', ''],
    ['the scheme alone', 'Bearer'],
    ['the scheme and a space', 'Bearer '],
    ['the key without a scheme', key],
    ['Basic with the key as password', `Basic ${Buffer.from(`acct:${key}`).toString('base64')}`],
    ['the key with a byte appended', `Bearer ${key}x`],
    ['the key with its last character changed', `Bearer ${key.slice(0, -1)}${flip(key.slice(-1))}`],
    ['the right prefix with another secret', `Bearer ${key.slice(0, 14)}${'A'.repeat(key.length - 14)}`],
    ['a well-formed unknown key', `Bearer hsk_${'A'.repeat(32)}`],
    ['a revoked key', `Bearer ${revokedKey}`],
    ['a 10 KB token', `Bearer ${'A'.repeat(10_000)}`],
  ];

  it.each(operations.map((op) => [`${op.method} ${op.path}`, op] as const))(
    '%s: every missing or wrong credential is 401 problem+json with WWW-Authenticate, before the body is even read, and writes nothing',
    async (_name, op) => {
      const before = await writes();
      const path = op.path.replace('{id}', alice.ids['message']!);
      const bodies = op.body ? [JSON.stringify(exampleOf(op.body)), '{"broken":'] : [undefined];
      const wrong: string[] = [];
      for (const [what, value] of CREDENTIALS) {
        for (const body of bodies) {
          const a = await rawRequest(base, {
            method: op.method,
            path,
            headers: [
              ...(value === null ? [] : [['authorization', Buffer.from(value, 'latin1')] as [string, Buffer]]),
              ...(body ? [['content-type', 'application/json'] as [string, string]] : []),
            ],
            ...(body ? { body } : {}),
          });
          const json = (() => {
            try {
              return JSON.parse(a.body) as Record<string, unknown>;
            } catch {
              return null;
            }
          })();
          const ok =
            a.status === 401 &&
            /^application\/problem\+json/.test(a.headers['content-type'] ?? '') &&
            a.headers['www-authenticate'] === 'Bearer' &&
            json?.['code'] === 'unauthorized' &&
            json?.['status'] === 401;
          if (!ok)
            wrong.push(`${what}${body ? ` (body ${body.slice(0, 20)})` : ''}: ${a.status} ${a.body.slice(0, 120)}`);
        }
      }
      expect(wrong).toEqual([]);
      expect(await writes()).toBe(before);
    },
  );

  it('the operational and documentation routes are the only ones served without a key', async () => {
    const open: string[] = [];
    for (const path of ['/healthz', '/readyz', '/metrics', '/openapi.json', '/docs/']) {
      if ((await request(base, 'GET', path, null)).status === 200) open.push(path);
    }
    expect(open).toEqual(['/healthz', '/readyz', '/metrics', '/openapi.json', '/docs/']);
    expect(
      Object.keys((await request(base, 'GET', '/openapi.json', null)).json.paths).every((p) => p.startsWith('/v1/')),
    ).toBe(true);
  });
});
