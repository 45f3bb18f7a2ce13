// Errors a person can follow: every problem's `type` resolves to the code's entry
// on a page the API serves itself, listed from the one catalogue of codes
// (src/api/codes.ts); an unknown field is named with the nearest known one; every
// route the document says may answer 415 does so for a body that is not JSON, and
// changes nothing; the reference at /docs, in a real browser, opens on Messages
// in Handset's name.

import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ERROR_CODES, isErrorCode } from '../../src/api/codes.js';
import { API_TAGS } from '../../src/api/docs.js';
import type { Platform } from '../../src/platform.js';
import { browserRequired, findChromium, HOW_TO_INSTALL, launchBrowser } from '../console/support/browser.js';
import { createAccount, request, type ApiClient } from '../support/api.js';
import { count, createTestDatabase, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';

let db: TestDatabase;
let platform: Platform;
let base: string;
let acme: ApiClient;
let doc: any;

beforeAll(async () => {
  db = await createTestDatabase();
  platform = await startTestPlatform({ databaseUrl: db.url, roles: ['api'] });
  base = platform.apiUrl!;
  acme = await createAccount(db.pool, base, 'Acme');
  doc = (await request(base, 'GET', '/openapi.json', null)).json;
});
afterAll(async () => {
  await platform.stop();
  await db.drop();
});

const SEND = { from: '+13125550001', to: '+15555550100' };
const messages = () => count(db.pool, 'SELECT * FROM messages WHERE account_id = $1', [acme.accountId]);

describe('problem types', () => {
  it('every problem answered links its type to its code’s entry on /docs/errors, a page the API serves', async () => {
    const answers = await Promise.all([
      request(base, 'GET', '/v1/messages', null),
      request(base, 'GET', '/v1/nothing', acme.key),
      acme.get('/v1/messages/msg_nope'),
      acme.post('/v1/messages', { ...SEND, text: 'hi' }),
      acme.post('/v1/messages', { from: SEND.from, body: 'hi' }),
      acme.post('/v1/messages', { ...SEND, to: '+1312', body: 'hi' }),
      acme.post('/v1/messages', '{"from":'),
      request(base, 'POST', '/v1/messages', acme.key, 'hi', { 'content-type': 'text/plain' }),
      acme.post('/v1/messages', { ...SEND, body: 'hi' }, { 'idempotency-key': '' }),
    ]);
    const codes = answers.map((a) => a.json.code);
    expect(codes).toEqual([
      'unauthorized',
      'route_not_found',
      'resource_not_found',
      'unknown_field',
      'invalid_request',
      'invalid_phone_number',
      'invalid_request',
      'unsupported_media_type',
      'invalid_idempotency_key',
    ]);
    const page = await fetch(new URL('/docs/errors', base));
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    const html = await page.text();
    for (const { json } of answers) {
      expect(json.type).toBe(`/docs/errors#${json.code}`);
      const link = new URL(json.type, `${base}/v1/messages`);
      expect(link.origin + link.pathname).toBe(`${base}/docs/errors`);
      expect(html).toContain(`<tr id="${link.hash.slice(1)}">`);
    }
  });

  it('the page lists every code of the catalogue, with its statuses, and the catalogue no code the API never answers', async () => {
    const html = await (await fetch(new URL('/docs/errors', base))).text();
    const rows = [...html.matchAll(/<tr id="([a-z_]+)"><td>.*?<\/td><td>([\d, ]+)<\/td>/g)].map((m) => [m[1], m[2]]);
    expect(rows).toEqual(Object.entries(ERROR_CODES).map(([code, d]) => [code, d.status.join(', ')]));

    const source = (dir: string): string[] =>
      readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
        e.isDirectory()
          ? source(path.join(dir, e.name))
          : e.name.endsWith('.ts')
            ? [readFileSync(path.join(dir, e.name), 'utf8')]
            : [],
      );
    const src = path.resolve(import.meta.dirname, '../../src');
    const code = source(src)
      .filter((text) => !text.includes('export const ERROR_CODES'))
      .join('\n');
    const unused = Object.keys(ERROR_CODES).filter((c) => !code.includes(`'${c}'`));
    expect(unused).toEqual([]);
  });

  it('every code a schema names for its own errors (x-code) is in the catalogue', () => {
    const named: unknown[] = [];
    const walk = (node: unknown): void => {
      if (Array.isArray(node)) node.forEach(walk);
      else if (node && typeof node === 'object') {
        for (const [k, v] of Object.entries(node)) k === 'x-code' ? named.push(v) : walk(v);
      }
    };
    walk(doc);
    expect(named.length).toBeGreaterThan(0);
    expect(named.filter((c) => !isErrorCode(c))).toEqual([]);
  });
});

describe('an unknown field', () => {
  it('"text" instead of "body" is 422 unknown_field naming it and suggesting body, and sends nothing', async () => {
    const res = await acme.post('/v1/messages', { ...SEND, text: 'Hello' });
    expect(res.status).toBe(422);
    expect(res.json).toMatchObject({
      code: 'unknown_field',
      param: 'text',
      detail: 'text: no such field — did you mean body?',
    });
    expect(await messages()).toBe(0);
  });

  it.each([
    [{ ...SEND, Body: 'hi' }, 'Body', 'body'],
    [{ ...SEND, body: 'hi', mediaUrls: [] }, 'mediaUrls', 'media_urls'],
    [{ ...SEND, body: 'hi', sendAt: '2030-01-01T00:00:00Z' }, 'sendAt', 'send_at'],
    [{ ...SEND, recipient: '+15555550100', body: 'hi' }, 'recipient', 'to'],
  ])('%j names %s and suggests %s', async (body, field, guess) => {
    const res = await acme.post('/v1/messages', body);
    expect(res.status).toBe(422);
    expect(res.json).toMatchObject({ code: 'unknown_field', param: field });
    expect(res.json.detail).toBe(`${field}: no such field — did you mean ${guess}?`);
  });

  it('in a query string, and with nothing near it', async () => {
    const query = await acme.get('/v1/messages?stauts=sent');
    expect(query.json).toMatchObject({ code: 'unknown_field', param: 'stauts' });
    expect(query.json.detail).toBe('stauts: no such query parameter — did you mean status?');

    const far = await acme.post('/v1/webhook_endpoints', { url: 'https://example.com/hooks', zzz: 1 });
    expect(far.json).toMatchObject({ code: 'unknown_field', param: 'zzz' });
    expect(far.json.detail).toMatch(/^zzz: no such field \(fields: url, .*event_types.*\)$/);
    expect(await messages()).toBe(0);
  });
});

describe('a body that is not JSON', () => {
  it('every route the document says may answer 415 answers a text/plain body with 415, and a form body too', async () => {
    const routes = Object.entries(doc.paths as Record<string, Record<string, { responses: object }>>).flatMap(
      ([p, methods]) =>
        Object.entries(methods)
          .filter(([, op]) => '415' in op.responses)
          .map(([method]) => ({ method: method.toUpperCase(), path: p.replace(/\{[^}]+\}/g, 'x_nope') })),
    );
    expect(routes.length).toBeGreaterThan(10);
    for (const { method, path: p } of routes) {
      for (const [type, body] of [
        ['text/plain', 'hello'],
        ['application/x-www-form-urlencoded', 'body=hello'],
      ] as const) {
        const res = await request(base, method, p, acme.key, body, { 'content-type': type });
        expect([method, p, type, res.status, res.json.code]).toEqual([method, p, type, 415, 'unsupported_media_type']);
        expect(res.json.detail).toBe(`a ${type} body: send JSON, as application/json`);
      }
    }
    expect(await messages()).toBe(0);
  });

  it('a body-less POST still needs no Content-Type at all', async () => {
    const res = await request(base, 'POST', '/v1/messages/msg_nope/cancel', acme.key);
    expect(res.json.code).toBe('resource_not_found');
  });
});

describe('the reference', () => {
  it('lists every tag an operation carries, Messages first', () => {
    const used = new Set(
      Object.values(doc.paths as Record<string, Record<string, { tags?: string[] }>>).flatMap((methods) =>
        Object.values(methods).flatMap((op) => op.tags ?? []),
      ),
    );
    expect(doc.tags.map((t: { name: string }) => t.name)).toEqual(API_TAGS.map((t) => t.name));
    expect([...used].filter((t) => !API_TAGS.some((a) => a.name === t))).toEqual([]);
    expect(doc.tags[0].name).toBe('Messages');
    expect(JSON.stringify(doc.servers)).not.toContain('`');
  });

  const chromium = findChromium();
  if (!chromium && !browserRequired) console.log(`the /docs browser test is skipped: no Chromium; ${HOW_TO_INSTALL}`);
  it.skipIf(!chromium && !browserRequired)(
    'in a browser, /docs opens on Messages in Handset’s name, tries requests against itself, and links the errors page',
    async () => {
      const browser = await launchBrowser();
      try {
        const { page } = browser;
        await page.goto(`${base}/docs`);
        await page.locator('.opblock-tag').first().waitFor();
        expect(await page.title()).toBe('Handset API');
        const sections = await page.locator('.opblock-tag').evaluateAll((els) => els.map((e) => e.id));
        expect(sections[0]).toBe('operations-tag-Messages');
        expect(await page.locator('.info .title').innerText()).toMatch(/^Handset API/);
        const text = await page.locator('body').innerText();
        expect(text).not.toMatch(/fastify|swagger/i);
        expect(text).not.toContain('`');
        expect(await page.locator('img').count()).toBe(0); // no framework logo
        expect(await page.locator('link[rel="icon"]').getAttribute('href')).toMatch(/icon\.svg$/);
        expect(await page.locator('.servers select option').allInnerTexts()).toEqual([`${base} - this Handset API`]);

        expect(await page.locator('.info a[href="/docs/errors"]').count()).toBe(1);
        await page.goto(`${base}/docs/errors#unknown_field`);
        expect(await page.title()).toBe('Handset API errors');
        expect(await page.locator('tr:target').getAttribute('id')).toBe('unknown_field');
        expect(browser.pageErrors).toEqual([]);
        expect(browser.requests.filter((u) => !u.startsWith(base))).toEqual([]); // nothing from elsewhere
      } finally {
        await browser.close();
      }
    },
  );
});
