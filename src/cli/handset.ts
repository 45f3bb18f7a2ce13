#!/usr/bin/env node
// The `handset` command: one entry point for every role and tool.
// It reads the environment once into a Config, and translates a ConfigError into
// one line on stderr naming the variable.

import { rm } from 'node:fs/promises';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { ConfigError, loadConfig, redactCredentials, type Config } from '../config.js';
import { accountCreate, apiKeyCreate } from '../accounts/accounts.js';
import { createPool } from '../db/pool.js';
import { withTx } from '../db/tx.js';
import { migrate } from '../db/migrate.js';
import { runAuditCommand } from '../audit/cli.js';
import { runReconcileCommand } from '../reconcile/cli.js';
import { startEmbeddedPostgres } from '../db/embedded.js';
import { devBanner, startDev, type DevHandle } from '../dev/dev.js';
import { readDevState } from '../dev/state.js';
import { runListen } from '../dev/listen.js';
import { runTrigger } from '../dev/trigger.js';
import { ROLES, startPlatform, type Platform, type Role } from '../platform.js';
import { runSimCommand } from '../sim/cli.js';
import { createFileLogger, createLogger, type Logger } from '../telemetry/log.js';

const USAGE = `usage: handset <command> [options]

commands:
  dev [--reset]                the whole platform locally (what npm start runs); --reset starts clean
  serve [--roles ingest,api,worker]
                               production roles; needs DATABASE_URL
  migrate                      apply migrations and exit
  accounts create --name NAME  create an account; prints {"account_id","api_key"} (the key is shown once)
  sim [options]                the Telnyx simulator on its own (handset sim --help)
  listen [--forward-to URL] [--events a,b]
                               subscribe a local endpoint; verify and print (or forward) every event
  trigger <scenario>           drive the simulator through the real pipeline (handset trigger for the list)
  audit [--json] [--grace S]   check the exactly-once invariants over the whole database; exit 1 on any violation
  reconcile [--dry-run]        ask the carrier about everything waiting past its bound for a carrier event
`;

type Command = (args: string[], config: Config, log: Logger) => Promise<number | 'running'>;

const commands: Record<string, { mode: 'dev' | 'serve'; run: Command }> = {
  serve: { mode: 'serve', run: serve },
  dev: { mode: 'dev', run: dev },
  migrate: { mode: 'serve', run: migrateCommand },
  accounts: { mode: 'serve', run: accountsCommand },
  sim: { mode: 'dev', run: (args, _config, log) => runSimCommand(args, log) },
  listen: {
    mode: 'dev',
    run: (args, config) => runListen(args, config.stateDir, { out: (l) => process.stdout.write(`${l}\n`) }),
  },
  audit: { mode: 'dev', run: auditCommand },
  trigger: {
    mode: 'dev',
    run: (args, config) => runTrigger(args, config.stateDir, (l) => process.stdout.write(`${l}\n`)),
  },
  reconcile: { mode: 'serve', run: reconcileCommand },
};

async function main(argv: string[]): Promise<void> {
  const [name, ...rest] = argv;
  const command = name ? commands[name] : undefined;
  if (!command) {
    process.stderr.write(USAGE);
    process.exit(name && name !== 'help' && name !== '--help' ? 2 : 0);
  }
  let config: Config;
  try {
    config = loadConfig(process.env, command.mode);
  } catch (err) {
    if (err instanceof ConfigError) exitWithConfigError(err);
    throw err;
  }
  const log = createLogger(config.logLevel);
  try {
    const result = await command.run(rest, config, log);
    if (result !== 'running') process.exit(result);
  } catch (err) {
    if (err instanceof ConfigError) exitWithConfigError(err);
    process.stderr.write(`handset ${name}: ${(err as Error).message}\n`);
    log.debug({ err }, 'command failed');
    process.exit(1);
  }
}

/** One line naming the variable; a URL in it never shows its credentials, wherever the error was raised. */
function exitWithConfigError(err: ConfigError): never {
  process.stderr.write(`handset: configuration error: ${redactCredentials(err.message)}\n`);
  process.exit(2);
}

function parseRoles(text: string | undefined): Role[] {
  if (!text) return [...ROLES];
  const roles = text.split(',').map((r) => r.trim());
  for (const r of roles) {
    if (!(ROLES as readonly string[]).includes(r)) throw new Error(`unknown role "${r}" (roles: ${ROLES.join(', ')})`);
  }
  return roles as Role[];
}

async function serve(args: string[], config: Config, log: Logger) {
  const { values } = parseArgs({ args, options: { roles: { type: 'string' } } });
  const roles = parseRoles(values.roles);
  if (!config.databaseUrl)
    throw new ConfigError('DATABASE_URL', 'is required by handset serve (use handset dev for a local database)');
  let starting: Promise<Platform> | undefined;
  onShutdown(log, async () => (await starting)?.stop());
  starting = startPlatform({ config, databaseUrl: config.databaseUrl, roles, log });
  await starting;
  return 'running' as const;
}

async function dev(args: string[], config: Config) {
  const { values } = parseArgs({ args, options: { reset: { type: 'boolean' } } });
  if (values.reset) await rm(config.stateDir, { recursive: true, force: true });
  const logFile = path.join(config.stateDir, 'handset.log');
  const log = createFileLogger(config.logLevel, logFile);
  let starting: Promise<DevHandle> | undefined;
  onShutdown(log, async () => (await starting)?.stop());
  process.stdout.write('Starting Handset (embedded PostgreSQL, migrations, simulator)…\n');
  starting = startDev(config, log);
  const handle = await starting;
  process.stdout.write(devBanner(handle.state, path.relative(process.cwd(), logFile) || logFile));
  return 'running' as const;
}

async function migrateCommand(_args: string[], config: Config, log: Logger) {
  if (!config.databaseUrl) throw new ConfigError('DATABASE_URL', 'is required by handset migrate');
  const pool = createPool(config.databaseUrl, { max: 2, applicationName: 'handset-migrate', log });
  try {
    const applied = await migrate(pool, log);
    process.stdout.write(applied.length ? `applied: ${applied.join(', ')}\n` : 'schema is up to date\n');
    return 0;
  } finally {
    await pool.end();
  }
}

async function accountsCommand(args: string[], config: Config, log: Logger) {
  const { values, positionals } = parseArgs({ args, options: { name: { type: 'string' } }, allowPositionals: true });
  if (positionals[0] !== 'create' || !values.name) throw new Error('usage: handset accounts create --name NAME');
  if (!config.databaseUrl) throw new ConfigError('DATABASE_URL', 'is required by handset accounts');
  const pool = createPool(config.databaseUrl, { max: 2, applicationName: 'handset-accounts', log });
  try {
    await migrate(pool, log);
    const created = await withTx(pool, async (tx) => {
      const account = await accountCreate(tx, values.name!);
      return { account_id: account.id, api_key: (await apiKeyCreate(tx, account.id)).key };
    });
    process.stdout.write(`${JSON.stringify(created)}\n`);
    return 0;
  } finally {
    await pool.end();
  }
}

/**
 * `handset audit` reads DATABASE_URL, else the database of the running `handset
 * dev`, else starts the embedded one under the state directory for the audit.
 */
async function auditCommand(args: string[], config: Config, log: Logger) {
  const io = {
    reconcile: {
      intervalMs: config.reconcileIntervalMs,
      afterMs: config.reconcileAfterMs,
      messageAfterMs: config.reconcileMessageAfterMs,
    },
  };
  if (config.databaseUrl) return runAuditCommand(args, config.databaseUrl, log, io);
  const dev = await readDevState(config.stateDir);
  if (dev && isAlive(dev.pid)) return runAuditCommand(args, dev.databaseUrl, log, io);
  if (!dev) throw new ConfigError('DATABASE_URL', 'is required by handset audit (or run it next to `handset dev`)');
  const pg = await startEmbeddedPostgres({ stateDir: config.stateDir, log });
  try {
    return await runAuditCommand(args, pg.url, log, io);
  } finally {
    await pg.stop();
  }
}

/**
 * `handset reconcile` against DATABASE_URL and the configured carrier, or next to
 * a running `handset dev`: its database and its simulator.
 */
async function reconcileCommand(args: string[], config: Config, log: Logger) {
  const out = (l: string) => process.stdout.write(`${l}\n`);
  if (args.includes('--help') || args.includes('-h')) return runReconcileCommand(['--help'], config, '', log, out);
  if (config.databaseUrl) return runReconcileCommand(args, config, config.databaseUrl, log, out);
  const dev = await readDevState(config.stateDir);
  if (!dev || !isAlive(dev.pid)) {
    throw new ConfigError('DATABASE_URL', 'is required by handset reconcile (or run it next to a running handset dev)');
  }
  const devConfig: Config = {
    ...config,
    telnyx: { ...config.telnyx, apiUrl: dev.carrier.TELNYX_API_URL, apiKey: dev.carrier.TELNYX_API_KEY },
  };
  return runReconcileCommand(args, devConfig, dev.databaseUrl, log, out);
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * SIGTERM/SIGINT: stop taking work and finish what is in flight; a second signal
 * forces exit. Installed before we print or start anything, so a signal that
 * arrives while we start (or right after a line a supervisor waits for) waits for
 * start-up and then stops cleanly instead of taking Node's default of dying on
 * the spot.
 */
function onShutdown(log: Logger, stop: () => Promise<void>): void {
  let stopping = false;
  const handler = (signal: NodeJS.Signals) => {
    if (stopping) {
      log.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    stopping = true;
    log.info({ signal }, 'shutting down gracefully');
    stop().then(
      () => process.exit(0),
      (err: Error) => {
        log.error({ err: err.message }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', handler);
  process.on('SIGINT', handler);
}

await main(process.argv.slice(2));
