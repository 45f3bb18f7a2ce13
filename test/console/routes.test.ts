// The console's files as the api role serves them: / redirects to /console, every
// console page gets the same HTML with a policy that allows only this origin, the
// npm packages' modules are served by version and cached for good, and nothing
// outside the fixed table of files can be reached. The console is not part of the
// API: the OpenAPI document does not list it. The dev banner names its URL
// without putting the key in it.

import { readFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { devBanner } from '../../src/dev/dev.js';
import { request } from '../support/api.js';
import { createTestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';

const db = await createTestDatabase();
const platform = await startTestPlatform({ databaseUrl: db.url, roles: ['api'] });
const base = platform.apiUrl!;
afterAll(async () => {
  await platform.stop();
  await db.drop();
});

const get = (path: string, headers: Record<string, string> = {}) => fetch(base + path, { headers, redirect: 'manual' });

/** The import map the page carries: bare module names → URLs under /console/vendor. */
async function importMap(): Promise<Record<string, string>> {
  const html = await (await get('/console')).text();
  const json = /<script type="importmap">(.*?)<\/script>/s.exec(html)?.[1];
  return JSON.parse(json!).imports;
}

describe('serving the console', () => {
  it('/ redirects to /console, and every console page is the same HTML with a same-origin-only policy', async () => {
    const root = await get('/');
    expect(root.status).toBe(302);
    expect(root.headers.get('location')).toBe('/console');
    const pages = await Promise.all(
      ['/console', '/console/', '/console/messages', '/console/messages/msg_123', '/console/sign-in?next=x'].map((p) =>
        get(p),
      ),
    );
    const bodies = await Promise.all(pages.map((r) => r.text()));
    for (const r of pages) {
      expect(r.status).toBe(200);
      expect(r.headers.get('content-type')).toBe('text/html; charset=utf-8');
      const csp = r.headers.get('content-security-policy')!;
      expect(csp).toContain("default-src 'none'");
      expect(csp).toContain("connect-src 'self'");
      expect(csp).toMatch(/script-src 'self' 'sha256-[A-Za-z0-9+/=]+'/);
      expect(r.headers.get('x-frame-options')).toBe('DENY');
      expect(r.headers.get('referrer-policy')).toBe('no-referrer');
    }
    expect(new Set(bodies).size).toBe(1);
    // no address in the page leaves the origin
    expect(bodies[0]).not.toMatch(/(src|href)="(https?:)?\/\//);
  });

  it('the import map points at the npm packages by version; those files are served, cached for good', async () => {
    const imports = await importMap();
    expect(Object.keys(imports).sort()).toEqual(['htm', 'htm/preact', 'openapi-fetch', 'preact', 'preact/hooks']);
    for (const url of Object.values(imports)) {
      expect(url).toMatch(/^\/console\/vendor\/(preact|htm|openapi-fetch)@\d+\.\d+\.\d+\//);
      const res = await get(url);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
      expect(res.headers.get('cache-control')).toBe('public, max-age=31536000, immutable');
      expect(await res.text()).toMatch(/export/);
    }
  });

  it("the console's own files revalidate by ETag: an unchanged file is 304", async () => {
    const first = await get('/console/app.js');
    expect(first.status).toBe(200);
    expect(first.headers.get('cache-control')).toBe('no-cache');
    const etag = first.headers.get('etag')!;
    expect((await get('/console/app.js', { 'if-none-match': etag })).status).toBe(304);
    expect((await get('/console/console.css')).headers.get('content-type')).toBe('text/css; charset=utf-8');
  });

  it('a file not in the table is 404 problem+json, however the path is spelled', async () => {
    for (const path of [
      '/console/nothing.js',
      '/console/../package.json',
      '/console/%2e%2e/package.json',
      '/console/..%2fsrc%2fconfig.ts',
      '/console/tsconfig.json',
      '/console/routes.ts',
      '/console/vendor/preact@0.0.0/dist/preact.mjs',
      '/console/vendor/preact@1/package.json',
    ]) {
      const res = await get(path);
      const body = await res.text();
      expect([res.status, path]).toEqual([404, path]);
      expect(JSON.parse(body)).toMatchObject({ status: 404, code: 'route_not_found' });
    }
  });

  it('is not part of the API: the OpenAPI document lists /v1 paths only, and /v1 still needs a key', async () => {
    const doc = (await request(base, 'GET', '/openapi.json', null)).json;
    expect(Object.keys(doc.paths).every((p) => p.startsWith('/v1/'))).toBe(true);
    expect((await request(base, 'GET', '/v1/messages', null)).status).toBe(401);
  });
});

describe("the endpoint page's link to @handset/inbox", () => {
  it('goes to a page the API serves, whose install line and example use the package as it is', async () => {
    const source = await (await get('/console/pages/endpoints.js')).text();
    expect(source).toContain('href="/docs/inbox"');
    const page = await get('/docs/inbox');
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8');
    const html = await page.text();
    const pkg = JSON.parse(readFileSync(new URL('../../packages/inbox/package.json', import.meta.url), 'utf8'));
    expect(html).toContain(`npm install ~/handset-inbox-${pkg.version}.tgz pg`);
    const { createInbox } = await import('@handset/inbox');
    const inbox = createInbox({ pool: {} as never, secret: `whsec_${Buffer.from('k'.repeat(24)).toString('base64')}` });
    for (const used of ['createInbox', 'migrate', 'nodeHandler', 'fetchHandler', 'prune']) {
      expect(html).toContain(used);
      if (used !== 'createInbox') expect(typeof (inbox as unknown as Record<string, unknown>)[used]).toBe('function');
    }
  });
});

describe('the dev banner', () => {
  it('prints the console URL and says to sign in with the printed key, which is never part of a URL', () => {
    const banner = devBanner(
      {
        apiUrl: 'http://127.0.0.1:3000',
        ingestUrl: 'http://127.0.0.1:3001',
        simUrl: 'http://127.0.0.1:3002/v2',
        simControlUrl: 'http://127.0.0.1:3002',
        databaseUrl: 'postgres://x',
        accountId: 'acct_1',
        apiKey: 'hsk_secretkey',
        number: '+13125550142',
        carrier: {
          TELNYX_API_URL: 'http://127.0.0.1:3002/v2',
          TELNYX_API_KEY: 'KEY',
          TELNYX_PUBLIC_KEY: 'pk',
          TELNYX_CONNECTION_ID: 'conn',
        },
        pid: 1,
      },
      '.handset/handset.log',
    );
    expect(banner).toMatch(/Console\s+http:\/\/127\.0\.0\.1:3000\/console\s+\(sign in with the API key above\)/);
    const urls = banner.match(/https?:\/\/\S+/g) ?? [];
    expect(urls.some((u) => u.includes('hsk_secretkey'))).toBe(false);
  });
});
