// Failures that say what to do: a tool that needs a running `handset dev` and
// finds none says so and how to start it; a busy port stops dev and serve before
// anything starts (no PostgreSQL, no migration), naming the variable that sets it.

import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runHandset } from '../support/process.js';

const dirs: string[] = [];
const servers: Server[] = [];
afterAll(async () => {
  for (const s of servers) s.close();
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

async function tempDir(): Promise<string> {
  const d = await mkdtemp(path.join(tmpdir(), 'handset-failures-'));
  dirs.push(d);
  return d;
}

/** A listener on a port the OS picks; it counts the connections it is offered. */
async function occupy(): Promise<{ port: number; connections: () => number }> {
  let n = 0;
  const s = createServer((socket) => {
    n++;
    socket.destroy();
  });
  servers.push(s);
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  return { port: (s.address() as { port: number }).port, connections: () => n };
}

/** A port nothing listens on (listened on, then closed). */
async function deadPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const { port } = s.address() as { port: number };
  await new Promise((resolve) => s.close(resolve));
  return port;
}

const postgresOf = (stateDir: string) =>
  execFileSync('ps', ['-eo', 'args'], { encoding: 'utf8' })
    .split('\n')
    .filter((l) => l.includes('postgres') && l.includes(stateDir));

describe('no handset dev running', () => {
  it.each([['listen'], ['trigger', 'delivered']])(
    'handset %s where dev never ran says so and how to start it, exit 1',
    async (...args) => {
      const stateDir = await tempDir();
      const r = await runHandset(args, { HANDSET_STATE_DIR: stateDir });
      expect(r.code).toBe(1);
      expect(r.output.trim()).toBe(
        `handset ${args[0]}: no handset dev running (none in ${stateDir}: start it with npm start, ` +
          'or pass --api-url and --api-key)',
      );
    },
  );

  it.each([['listen'], ['trigger', 'delivered']])(
    'handset %s after dev stopped names where it ran and how to start it, exit 1',
    async (...args) => {
      const stateDir = await tempDir();
      const apiUrl = `http://127.0.0.1:${await deadPort()}`;
      // What a dev killed without a chance to clean up leaves behind.
      await writeFile(
        path.join(stateDir, 'dev.json'),
        JSON.stringify({ apiUrl, apiKey: 'hsk_gone', pid: 2 ** 22 + 1, number: '+13125550142' }),
      );
      const r = await runHandset(args, { HANDSET_STATE_DIR: stateDir });
      expect(r.code).toBe(1);
      expect(r.output.trim()).toBe(`handset ${args[0]}: no handset dev running at ${apiUrl} (start it with npm start)`);
    },
  );

  it('an API given by flag that does not answer is named, with why', async () => {
    const apiUrl = `http://127.0.0.1:${await deadPort()}`;
    const r = await runHandset(['trigger', 'delivered', '--api-url', apiUrl, '--api-key', 'hsk_x'], {
      HANDSET_STATE_DIR: await tempDir(),
    });
    expect(r.code).toBe(1);
    expect(r.output.trim()).toBe(`handset trigger: no Handset API answers at ${apiUrl} (ECONNREFUSED)`);
  });
});

describe('a busy port', () => {
  it.each(['HANDSET_API_PORT', 'HANDSET_INGEST_PORT', 'HANDSET_SIM_PORT'])(
    'stops handset dev before PostgreSQL starts, naming %s',
    async (variable) => {
      const stateDir = await tempDir();
      const busy = await occupy();
      const r = await runHandset(['dev'], {
        HANDSET_STATE_DIR: stateDir,
        HANDSET_API_PORT: '0',
        HANDSET_INGEST_PORT: '0',
        HANDSET_SIM_PORT: '0',
        [variable]: String(busy.port),
      });
      expect(r.code).toBe(1);
      expect(r.output.trim()).toBe(
        `handset dev: port ${busy.port} on 127.0.0.1 (${variable}) is in use: stop what uses it, ` +
          `or set ${variable} to another port (0 = any free port)`,
      );
      expect(existsSync(path.join(stateDir, 'postgres'))).toBe(false);
      expect(existsSync(path.join(stateDir, 'postgres', 'postmaster.pid'))).toBe(false);
      expect(postgresOf(stateDir)).toEqual([]);
      expect(busy.connections()).toBe(0); // checked by binding, never by knocking
    },
  );

  it('stops handset serve before it reaches the database', async () => {
    const busy = await occupy();
    const database = await occupy();
    const r = await runHandset(['serve', '--roles', 'api'], {
      DATABASE_URL: `postgres://u:p@127.0.0.1:${database.port}/x`,
      TELNYX_API_KEY: 'KEY_test',
      HANDSET_HOST: '127.0.0.1',
      HANDSET_API_PORT: String(busy.port),
    });
    expect(r.code).toBe(1);
    expect(r.output.trim()).toMatch(
      new RegExp(`^handset serve: port ${busy.port} on 127.0.0.1 \\(HANDSET_API_PORT\\)`),
    );
    expect(database.connections()).toBe(0);
  });
});

describe('handset dev already running here', () => {
  it('a second handset dev on the same state directory says so, and starts nothing', async () => {
    const stateDir = await tempDir();
    await mkdir(stateDir, { recursive: true });
    // This test process stands in for the running dev: its pid is alive.
    await writeFile(
      path.join(stateDir, 'dev.json'),
      JSON.stringify({ apiUrl: 'http://127.0.0.1:3000', pid: process.pid }),
    );
    const r = await runHandset(['dev'], { HANDSET_STATE_DIR: stateDir });
    expect(r.code).toBe(1);
    expect(r.output.trim()).toBe(
      `handset dev: handset dev is already running here (pid ${process.pid}, API http://127.0.0.1:3000)`,
    );
    expect(await readdir(stateDir)).toEqual(['dev.json']);
  });
});
