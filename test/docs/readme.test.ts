// The README as a newcomer follows it: every `sh` block runs, in order, against a
// real `handset dev`, and exits 0; the TypeScript example compiles against the
// @handset/client the README's own commands packed and installed, and runs.
//
// What this test does for the reader, and only that: `npm install && npm start` is
// the dev instance the other blocks talk to (the suite has installed and built;
// `handset dev` runs on free ports and on this file's database, where a reader's
// starts its own PostgreSQL), the key and URL it printed replace `hsk_…` and
// http://127.0.0.1:3000 as a reader pastes them, `~` is a fresh home with the
// reader's own project in ~/my-app, npm answers from this machine's cache first, a
// block that runs until ^C (handset listen) runs in the background until the end,
// and `npm test` is this suite itself. The TypeScript example is compiled with tsc
// and run with node where the README suggests tsx (not a dependency here).

import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../support/db.js';
import { readMarkdown, ROOT } from '../support/markdown.js';
import { readerEnv, run } from '../support/npm.js';
import { type HandsetProcess, spawnHandset } from '../support/process.js';

const README = readMarkdown('README.md');
const BLOCKS = README.blocks.filter((b) => b.lang === 'sh' || b.lang === 'ts');
const TWO_COMMANDS = 'npm install && npm start';
const RUNS_UNTIL_STOPPED = /^npx handset listen\b/;

let db: TestDatabase;
let dev: HandsetProcess;
let apiUrl: string;
let apiKey: string;
let home: string;
let stateDir: string;
let env: Record<string, string>;
const background: { block: string; child: ChildProcess; output: () => string }[] = [];

beforeAll(async () => {
  db = await createTestDatabase();
  home = await mkdtemp(path.join(tmpdir(), 'handset-readme-home-'));
  stateDir = await mkdtemp(path.join(tmpdir(), 'handset-readme-state-'));
  const app = path.join(home, 'my-app');
  await mkdir(app);
  await writeFile(path.join(app, 'package.json'), JSON.stringify({ name: 'my-app', private: true, type: 'module' }));
  env = readerEnv(home, { HANDSET_STATE_DIR: stateDir });
  dev = spawnHandset(['dev'], {
    DATABASE_URL: db.url,
    HANDSET_STATE_DIR: stateDir,
    HANDSET_API_PORT: '0',
    HANDSET_INGEST_PORT: '0',
    HANDSET_SIM_PORT: '0',
  });
  apiKey = (await dev.waitFor(/API key\s+(hsk_\S+)/, 90_000))[1]!;
  apiUrl = (await dev.waitFor(/API\s+(http:\/\/\S+)/))[1]!;
}, 120_000);

afterAll(async () => {
  const running = (c: ChildProcess) => c.exitCode === null && c.signalCode === null;
  for (const b of background) if (running(b.child)) process.kill(-b.child.pid!, 'SIGKILL');
  if (dev && running(dev.child)) dev.child.kill('SIGKILL');
  await db?.drop();
  for (const d of [home, stateDir]) if (d) await rm(d, { recursive: true, force: true });
});

/** A block as the reader pastes it: the key and URL `npm start` printed in place of the README's. */
function asReader(text: string): string {
  const pasted = text.replaceAll('http://127.0.0.1:3000', apiUrl).replaceAll('hsk_…', apiKey);
  expect(pasted).not.toMatch(/hsk_…|127\.0\.0\.1:3000\b/);
  return pasted;
}

/** Whatever JSON a block printed is an answer, not a problem (curl exits 0 on a 4xx). */
function noProblems(stdout: string) {
  for (const line of stdout.split('\n')) {
    let answer: unknown;
    try {
      answer = JSON.parse(line);
    } catch {
      continue;
    }
    expect(answer, line).not.toMatchObject({ status: expect.any(Number), code: expect.any(String) });
  }
}

function startInBackground(block: string) {
  // Its own process group, so that ^C reaches the whole of it, as a terminal's does.
  const child = spawn('bash', ['-e', '-o', 'pipefail', '-c', block], {
    cwd: ROOT,
    env,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (c: Buffer) => (out += c.toString('utf8')));
  child.stderr!.on('data', (c: Buffer) => (out += c.toString('utf8')));
  const started = { block, child, output: () => out };
  background.push(started);
  return started;
}

async function until(what: () => boolean, timeoutMs: number, why: () => string) {
  const deadline = Date.now() + timeoutMs;
  while (!what()) {
    if (Date.now() > deadline) throw new Error(why());
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe("the README's commands, run as a reader runs them", () => {
  it('opens with the two commands, and `npm start` is the handset dev the other blocks run against', async () => {
    expect(BLOCKS[0]?.text).toBe(TWO_COMMANDS);
    expect(BLOCKS.filter((b) => b.lang === 'sh').map((b) => b.text)).toContain('npm test');
    const scripts = JSON.parse(await readFile(path.join(ROOT, 'package.json'), 'utf8')).scripts;
    expect(scripts.start).toMatch(/node dist\/cli\/handset\.js dev$/);
    expect(scripts.test).toBeTruthy();
    expect(dev.output()).toContain(`API key    ${apiKey}`);
  });

  for (const block of BLOCKS) {
    const first = block.text.split('\n')[0]!;
    if (block.text === TWO_COMMANDS || block.text === 'npm test') continue;

    if (block.lang === 'ts') {
      it(`line ${block.line}: the TypeScript example compiles against the installed @handset/client and sends a message`, async () => {
        const app = path.join(home, 'my-app');
        expect(
          existsSync(path.join(app, 'node_modules/@handset/client/package.json')),
          'installed by a block above',
        ).toBe(true);
        await writeFile(path.join(app, 'send.ts'), block.text);
        await writeFile(
          path.join(app, 'tsconfig.json'),
          JSON.stringify({
            compilerOptions: {
              target: 'ES2022',
              module: 'NodeNext',
              moduleResolution: 'NodeNext',
              strict: true,
              skipLibCheck: false,
              types: ['node'],
              typeRoots: [path.join(ROOT, 'node_modules/@types')],
            },
            files: ['send.ts'],
          }),
        );
        const tsc = path.join(ROOT, 'node_modules/typescript/bin/tsc');
        const compiled = await run(process.execPath, [tsc, '-p', 'tsconfig.json'], { cwd: app, env });
        expect(compiled.stdout + compiled.stderr).toBe('');
        expect(compiled.code).toBe(0);
        const ran = await run(process.execPath, ['send.js'], {
          cwd: app,
          env: { ...env, HANDSET_API_KEY: apiKey, HANDSET_API_URL: apiUrl },
        });
        expect(ran.stderr).toBe('');
        expect(ran.stdout).toMatch(/^msg_\w+ queued\n$/);
      });
      continue;
    }

    if (RUNS_UNTIL_STOPPED.test(first)) {
      it(`line ${block.line}: \`${first}\` starts and keeps running until ^C`, async () => {
        const started = startInBackground(asReader(block.text));
        await until(
          () => /Ready!/.test(started.output()),
          60_000,
          () => `not ready:\n${started.output()}`,
        );
      });
      continue;
    }

    it(`line ${block.line}: \`${first}\` exits 0`, async () => {
      const ran = await run('bash', ['-e', '-o', 'pipefail', '-c', asReader(block.text)], { cwd: ROOT, env });
      expect(ran.code, `${ran.stdout}\n${ran.stderr}`).toBe(0);
      noProblems(ran.stdout);
    });
  }

  it('what ran in the background printed each event, verified, and ^C stops it and handset dev with exit 0', async () => {
    expect(background.length).toBeGreaterThan(0);
    for (const b of background) {
      expect(b.output()).toMatch(/✔ .*message\.delivered/);
      expect(b.output()).not.toContain('✘');
      const exited = new Promise<string>((resolve) =>
        b.child.on('exit', (code, signal) => resolve(signal ?? `exit ${code}`)),
      );
      process.kill(-b.child.pid!, 'SIGINT');
      // npx itself ends by the signal it got, whatever the command it ran did (a terminal shows 130 for any
      // `npx … ^C`); handset's part is to finish what it was doing and say so, which it does only on a clean stop.
      expect(['exit 0', 'SIGINT']).toContain(await exited);
      expect(b.output()).toMatch(/stopped\s*$/);
    }
    dev.child.kill('SIGINT');
    expect((await dev.exited).code).toBe(0);
    expect(dev.output()).toMatch(/stopped\s*$/);
  });
});
