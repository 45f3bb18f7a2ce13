// @handset/client as a customer gets it: `npm pack` of packages/client, installed
// into a project of its own outside this checkout (so nothing resolves through the
// server's node_modules). It carries its built client and nothing of the server, and
// its runtime dependency tree is openapi-fetch's.

import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT } from '../support/markdown.js';
import { npmPack, readerEnv, run } from '../support/npm.js';

let dir: string;
let app: string;
let packed: { tarball: string; files: string[] };
let env: Record<string, string>;

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'handset-client-pack-'));
  app = path.join(dir, 'app');
  await mkdir(app);
  await writeFile(path.join(app, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }));
  env = readerEnv(dir);
  packed = await npmPack(ROOT, 'packages/client', dir, env);
  const installed = await run('npm', ['install', packed.tarball], { cwd: app, env });
  expect(installed.code, installed.stderr).toBe(0);
}, 120_000);
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** Every package in a `npm ls --json` tree, by name. */
function names(tree: { dependencies?: Record<string, object> }): string[] {
  return Object.entries(tree.dependencies ?? {}).flatMap(([name, sub]) => [name, ...names(sub)]);
}

describe('@handset/client, packed', () => {
  it('holds its built client, types and README, and no source of the server', () => {
    expect(packed.files.filter((f) => !/^(dist\/[\w.]+|package\.json|README\.md)$/.test(f))).toEqual([]);
    for (const f of ['client', 'webhooks', 'schema.gen'])
      expect(packed.files).toEqual(expect.arrayContaining([`dist/${f}.js`, `dist/${f}.d.ts`]));
  });

  it('installs alone with openapi-fetch as its one runtime dependency, and nothing of the server', async () => {
    const ls = await run('npm', ['ls', '--omit=dev', '--all', '--json'], { cwd: app, env });
    expect(ls.code, ls.stderr).toBe(0);
    const tree = JSON.parse(ls.stdout) as { dependencies: Record<string, { dependencies?: Record<string, object> }> };
    expect(Object.keys(tree.dependencies)).toEqual(['@handset/client']);
    expect(Object.keys(tree.dependencies['@handset/client']!.dependencies ?? {})).toEqual(['openapi-fetch']);
    const server = JSON.parse(await readFile(path.join(ROOT, 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
    };
    const shared = new Set(['openapi-fetch', '@handset/client']);
    const installed = names(tree);
    expect(Object.keys(server.dependencies).filter((d) => !shared.has(d) && installed.includes(d))).toEqual([]);
  });

  it('works where it is installed: a client to call the API with, and a verifier that refuses a forged webhook', async () => {
    const script = `
      import { createClient, constructEvent, WebhookVerificationError } from '@handset/client';
      const hs = createClient({ apiKey: 'hsk_x', baseUrl: 'http://127.0.0.1:1' });
      const headers = { 'webhook-id': 'evt_1', 'webhook-timestamp': String(Math.floor(Date.now() / 1000)), 'webhook-signature': 'v1,AAAA' };
      let refused = false;
      try { constructEvent('whsec_' + Buffer.alloc(32).toString('base64'), headers, '{}'); } catch (e) { refused = e instanceof WebhookVerificationError; }
      console.log(typeof hs.GET, typeof hs.POST, refused);
    `;
    const out = await run(process.execPath, ['--input-type=module', '-e', script], { cwd: app, env });
    expect(out.stderr).toBe('');
    expect(out.stdout.trim()).toBe('function function true');
  });
});
