// The OpenAPI document a generator reads: what the server serves passes
// `redocly lint` with no error and no warning, every operation has an
// operationId, every 4xx it declares is problem+json, resources are named
// components and creates declare Idempotency-Key.

import { execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Platform } from '../../src/platform.js';
import { request } from '../support/api.js';
import { createTestDatabase, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';

const run = promisify(execFile);
const ROOT = path.resolve(import.meta.dirname, '../..');

let db: TestDatabase;
let platform: Platform;
let doc: any;

beforeAll(async () => {
  db = await createTestDatabase();
  platform = await startTestPlatform({ databaseUrl: db.url, roles: ['api'] });
  doc = (await request(platform.apiUrl!, 'GET', '/openapi.json', null)).json;
});
afterAll(async () => {
  await platform.stop();
  await db.drop();
});

const operations = () =>
  Object.entries(doc.paths as Record<string, Record<string, { operationId?: string; responses: object }>>).flatMap(
    ([p, methods]) => Object.entries(methods).map(([method, op]) => ({ route: `${method.toUpperCase()} ${p}`, op })),
  );

describe('the OpenAPI document', () => {
  it('passes redocly lint with no errors and no warnings', async () => {
    const file = path.join(mkdtempSync(path.join(tmpdir(), 'handset-openapi-')), 'openapi.json');
    writeFileSync(file, JSON.stringify(doc));
    const bin = path.join(ROOT, 'node_modules/.bin/redocly');
    const out = await run(bin, ['lint', '--config', path.join(ROOT, 'redocly.yaml'), '--format=json', file], {
      cwd: ROOT,
    }).catch((err: { stdout: string }) => err);
    const problems = (JSON.parse(out.stdout.slice(out.stdout.indexOf('{'))).problems ?? []) as {
      ruleId: string;
      severity: string;
      message: string;
    }[];
    expect(problems.map((p) => `${p.severity} ${p.ruleId}: ${p.message}`)).toEqual([]);
  }, 60_000);

  it('every operation has a camelCase operationId of its own', () => {
    const ids = operations().map(({ route, op }) => ({ route, id: op.operationId ?? 'missing' }));
    expect(ids.filter(({ id }) => !/^[a-z][a-zA-Z]+$/.test(id))).toEqual([]);
    expect(new Set(ids.map((i) => i.id)).size).toBe(ids.length);
  });

  it('every 4xx an operation declares is application/problem+json with the Problem schema', () => {
    const wrong = operations().flatMap(({ route, op }) =>
      Object.entries(op.responses as Record<string, { content?: Record<string, { schema: unknown }> }>)
        .filter(([status]) => status.startsWith('4'))
        .filter(
          ([, r]) =>
            JSON.stringify(r.content) !==
            JSON.stringify({ 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } }),
        )
        .map(([status]) => `${route} ${status}`),
    );
    expect(wrong).toEqual([]);
    // Every route can be refused its key, rate limited and sent bad input.
    const without = operations().filter(({ op }) => !['401', '422', '429'].every((s) => s in op.responses));
    expect(without.map((o) => o.route)).toEqual([]);
  });

  it('no response is described as "Default Response" and resources are named components', () => {
    const defaults = operations().flatMap(({ route, op }) =>
      Object.entries(op.responses as Record<string, { description: string }>)
        .filter(([, r]) => r.description === 'Default Response')
        .map(([status]) => `${route} ${status}`),
    );
    expect(defaults).toEqual([]);
    expect(Object.keys(doc.components.schemas)).toEqual(
      expect.arrayContaining(['Message', 'Call', 'Leg', 'Event', 'Delivery', 'WebhookEndpoint', 'Problem', 'Usage']),
    );
    expect(doc.paths['/v1/messages/{id}'].get.responses['200'].content['application/json'].schema).toEqual({
      $ref: '#/components/schemas/Message',
    });
  });

  it('creates that honour Idempotency-Key declare it as a header parameter', () => {
    for (const p of [
      '/v1/messages',
      '/v1/calls',
      '/v1/phone_numbers',
      '/v1/webhook_endpoints',
      '/v1/tenants',
      '/v1/api_keys',
    ]) {
      expect(doc.paths[p].post.parameters).toEqual(
        expect.arrayContaining([expect.objectContaining({ in: 'header', name: 'idempotency-key' })]),
      );
    }
  });

  it('a query parameter the API fills in by default is not required of the caller (a list without ?limit)', () => {
    const required = Object.entries(doc.paths as Record<string, Record<string, { parameters?: any[] }>>).flatMap(
      ([p, methods]) =>
        Object.entries(methods).flatMap(([m, op]) =>
          (op.parameters ?? [])
            .filter((x) => x.in === 'query' && x.schema && 'default' in x.schema && x.required)
            .map((x) => `${m.toUpperCase()} ${p} ?${x.name}`),
        ),
    );
    expect(required).toEqual([]);
    const lists = operations().filter(({ op }) =>
      ((op as { parameters?: { name: string }[] }).parameters ?? []).some((x) => x.name === 'limit'),
    );
    expect(lists.length).toBeGreaterThanOrEqual(9);
  });
});
