// The event catalogue in the OpenAPI document (its `webhooks`): every event type
// is there, and the bodies receivers really get conform to it, so types generated
// from it hold.

import { Check, Errors } from 'typebox/schema';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { undocumentedEventTypes } from '../../src/outbox/catalogue.js';
import { EVENT_TYPES } from '../../src/outbox/outbox.sql.js';
import { EVENT_SCHEMAS, type Platform } from '../../src/platform.js';
import { type ApiClient, createAccount, request } from '../support/api.js';
import { createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { type Receiver, startReceiver } from '../support/receiver.js';

let db: TestDatabase;
let sim: Simulator; // the carrier a number's claim is checked with
let platform: Platform;
let acme: ApiClient;
let receiver: Receiver;

beforeAll(async () => {
  db = await createTestDatabase();
  sim = await startSimulator({ webhookUrl: null, seed: 'catalogue' });
  platform = await startTestPlatform({
    databaseUrl: db.url,
    roles: ['api', 'worker'],
    env: { TELNYX_API_URL: sim.url, TELNYX_API_KEY: sim.apiKey },
  });
  acme = await createAccount(db.pool, platform.apiUrl!, 'Catalogue');
  receiver = await startReceiver();
});
afterAll(async () => {
  await platform.stop();
  await sim.close();
  await receiver.close();
  await db.drop();
});

describe('the event catalogue', () => {
  it('documents every event type, and nothing else', async () => {
    expect(undocumentedEventTypes(EVENT_SCHEMAS)).toEqual([]);
    const doc = (await request(platform.apiUrl!, 'GET', '/openapi.json', null)).json;
    expect(Object.keys(doc.webhooks).sort()).toEqual([...EVENT_TYPES].sort());
    expect(
      doc.webhooks['message.delivered'].post.requestBody.content['application/json'].schema.properties.type,
    ).toEqual(expect.objectContaining({ const: 'message.delivered' }));
  });

  it('the bodies a receiver gets conform to the schema of their type', async () => {
    const doc = (await request(platform.apiUrl!, 'GET', '/openapi.json', null)).json;
    const watcher = await acme.post('/v1/webhook_endpoints', { url: receiver.url });
    receiver.secrets = [watcher.json.secret];
    const other = await acme.post('/v1/webhook_endpoints', { url: `${receiver.url}/other` });
    // An operational event about `other` (to the watcher), then one to `watcher` alone.
    await acme.patch(`/v1/webhook_endpoints/${other.json.id}`, { enabled: false });
    await acme.patch(`/v1/webhook_endpoints/${other.json.id}`, { enabled: true });
    await acme.post(`/v1/webhook_endpoints/${watcher.json.id}/test`);
    // And a message's: scheduled, then canceled.
    expect((await acme.post('/v1/phone_numbers', { number: '+13125550901' })).status).toBe(201);
    const m = await acme.post('/v1/messages', {
      from: '+13125550901',
      to: '+15555550100',
      body: 'later',
      send_at: new Date(Date.now() + 3_600_000).toISOString(),
    });
    await acme.post(`/v1/messages/${m.json.id}/cancel`);

    const want = ['webhook_endpoint.disabled', 'webhook_endpoint.enabled', 'webhook_endpoint.test', 'message.canceled'];
    await eventually(async () => want.every((t) => receiver.events().some((e) => e.type === t)));
    for (const body of receiver.events()) {
      const schema = resolveRefs(doc, doc.webhooks[body.type].post.requestBody.content['application/json'].schema);
      expect({
        type: body.type,
        errors: Errors(schema, body)[1].map((e) => `${e.instancePath} ${e.message}`),
      }).toEqual({
        type: body.type,
        errors: [],
      });
      expect(Check(schema, body)).toBe(true);
    }
  });
});

/** The schema with every $ref into components.schemas replaced by what it names. */
function resolveRefs(doc: any, node: unknown): any {
  if (Array.isArray(node)) return node.map((n) => resolveRefs(doc, n));
  if (node === null || typeof node !== 'object') return node;
  const ref = (node as { $ref?: string }).$ref;
  if (ref) return resolveRefs(doc, doc.components.schemas[ref.replace('#/components/schemas/', '')]);
  return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, resolveRefs(doc, v)]));
}
