#!/usr/bin/env node
// The `handset` command: one entry point for every role and tool, on commander.
// Each tool's flags are declared beside the code they drive; this file builds the
// tree and attaches the actions. The environment is read into a Config only when a
// command runs, so `--help` and usage errors touch nothing; the platform, the
// database client and the simulators are loaded by the commands that use them,
// so those answer in a fraction of a second. Errors are translated
// once, here: a usage error names the command and what was wrong (exit 2), a
// ConfigError is one line naming the variable (exit 2), any other failure one line
// (exit 1).

import { readFileSync } from 'node:fs';
import { rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Argument, Command, CommanderError, InvalidArgumentError } from 'commander';
import type pg from 'pg';
import {
  keysCommands,
  keysCreate,
  keysList,
  keysRevoke,
  type KeysCreateFlags,
  type KeysListFlags,
  type KeysRevokeFlags,
} from '../accounts/cli.js';
import { auditCommand, auditDatabase, type AuditFlags } from '../audit/cli.js';
import { ConfigError, loadConfig, redactCredentials, ROLES, type Config, type Mode, type Role } from '../config.js';
import type { DevHandle } from '../dev/dev.js';
import { listenCommand, runListen, type ListenFlags } from '../dev/listen.js';
import { findDev, noteStateDir, runningDev, talkingTo } from '../dev/state.js';
import { runTrigger, SCENARIOS, triggerCommand, type TriggerFlags } from '../dev/trigger.js';
import type { Platform } from '../platform.js';
import { reconcileCommand, runReconcile, type ReconcileFlags } from '../reconcile/cli.js';
import { runSim, simArgs, simCommand } from '../sim/cli.js';
import { createFileLogger, createLogger, type Logger } from '../telemetry/log.js';
import { commandPath, EXIT, EXIT_STATUS_HELP, styled, UsageError } from './command.js';
import { completionScript, SHELLS, type Shell } from './completion.js';
import { assertPortsFree } from './ports.js';

const { version } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  version: string;
};

/** What a command's action ends with: an exit code, or 'running' (it exits when told to stop). */
type Outcome = number | 'running';
type Action = (config: Config, log: Logger, cmd: Command) => Promise<Outcome>;

let outcome: Outcome = EXIT.ok;

/**
 * The action of a command: reads the configuration for its mode (or the mode the
 * environment chooses, for a command that serves either), runs, and translates what it throws.
 */
function act(mode: Mode | ((env: NodeJS.ProcessEnv) => Mode), run: Action) {
  return async (...args: unknown[]) => {
    const cmd = args.at(-1) as Command;
    let log = createLogger('info');
    try {
      const config = loadConfig(process.env, typeof mode === 'function' ? mode(process.env) : mode);
      log = createLogger(config.logLevel);
      outcome = await run(config, log, cmd);
    } catch (err) {
      if (err instanceof UsageError) cmd.error(err.message, { exitCode: EXIT.usage, code: 'handset.usage' });
      if (err instanceof ConfigError) {
        // A URL in it never shows its credentials, wherever the error was raised.
        process.stderr.write(`handset: configuration error: ${redactCredentials(err.message)}\n`);
        outcome = EXIT.usage;
        return;
      }
      process.stderr.write(`${commandPath(cmd)}: ${(err as Error).message}\n`);
      log.debug({ err }, 'command failed');
      outcome = EXIT.failure;
    }
  };
}

const print = (line: string) => process.stdout.write(`${line}\n`);

export function handsetProgram(): Command {
  const program = new Command('handset')
    .description('Handset: SMS, MMS and calls on Telnyx, with exactly-once webhooks')
    .version(version, '-V, --version', 'print the version')
    .addHelpCommand('help [command]', 'show the help of a command')
    .addHelpText('after', `\n${EXIT_STATUS_HELP}`);

  program
    .command('dev')
    .description('the whole platform locally (npm start): embedded PostgreSQL, the simulator, every role')
    .option('--reset', 'start from scratch: a new database, demo account and key')
    .addHelpText(
      'after',
      [
        '',
        'State lives in HANDSET_STATE_DIR (./.handset); ports: HANDSET_API_PORT, HANDSET_INGEST_PORT, HANDSET_SIM_PORT.',
        'Every other command run in this checkout finds this dev, wherever its state is. As root, PostgreSQL runs as',
        'the "postgres" user: when it cannot enter the state directory, its data goes to /var/tmp/handset-data-0/.',
      ].join('\n'),
    )
    .action(act('dev', dev));

  program
    .command('serve')
    .description('production: the roles, against DATABASE_URL')
    .option('--roles <roles>', `comma-separated roles to run (${ROLES.join(', ')})`, parseRoles, [...ROLES])
    .addHelpText(
      'after',
      '\nEach role can run as its own process, any number of replicas. SIGTERM/SIGINT stop taking work, ' +
        'finish what is\nin flight and close the pools.',
    )
    .action(act('serve', serve));

  program
    .command('migrate')
    .description('apply the database migrations to DATABASE_URL and exit')
    .action(act('serve', migrateCommand));

  const accounts = program.command('accounts').description('manage accounts');
  accounts
    .command('create')
    .description('create an account and its first API key (shown once, stored hashed)')
    .requiredOption('--name <name>', 'the account’s name')
    .option('--json', 'print {"account_id", "api_key"} as JSON')
    .addHelpText('after', '\nWrites to DATABASE_URL, else to the database of this checkout’s handset dev.')
    .action(act('serve', accountsCreate));
  const keys = keysCommands();
  accounts.addCommand(keys.keys);
  keys.create.action(
    act('serve', (config, log, cmd) =>
      withAccountsPool(config, log, 'handset accounts keys create', async (pool) => {
        await keysCreate(pool, cmd.opts<KeysCreateFlags>(), print);
        return EXIT.ok;
      }),
    ),
  );
  keys.list.action(
    act('serve', (config, log, cmd) =>
      withAccountsPool(config, log, 'handset accounts keys list', async (pool) => {
        await keysList(pool, cmd.opts<KeysListFlags>(), print);
        return EXIT.ok;
      }),
    ),
  );
  keys.revoke.action(
    act('serve', (config, log, cmd) =>
      withAccountsPool(config, log, 'handset accounts keys revoke', async (pool) => {
        await keysRevoke(pool, cmd.processedArgs[0] as string, cmd.opts<KeysRevokeFlags>(), print);
        return EXIT.ok;
      }),
    ),
  );

  program.addCommand(simCommand().action(act('dev', async (_config, log, cmd) => runSim(simArgs(cmd.opts()), log))));

  program.addCommand(
    listenCommand().action(
      act('dev', (config, _log, cmd) =>
        runListen(cmd.opts<ListenFlags>(), config.stateDir, {
          out: print,
          err: (line) => process.stderr.write(`${line}\n`),
        }),
      ),
    ),
  );

  program.addCommand(
    triggerCommand().action(
      act('dev', (config, _log, cmd) =>
        runTrigger(
          cmd.processedArgs[0] as string | undefined,
          cmd.opts<TriggerFlags>(),
          config.stateDir,
          print,
          (line) => process.stderr.write(`${line}\n`),
        ),
      ),
    ),
  );

  // Against DATABASE_URL (a database `handset serve` writes) with serve's defaults, else dev's.
  program.addCommand(auditCommand().action(act((env) => (env.DATABASE_URL?.trim() ? 'serve' : 'dev'), audit)));
  program.addCommand(reconcileCommand().action(act('serve', reconcile)));

  program
    .command('openapi')
    .description('print the OpenAPI document the API serves (for a client generator; no database needed)')
    .option('--out <file>', 'write it to this file instead of standard output')
    .action(
      act('dev', async (_config, _log, cmd) => {
        const { openApiDocument } = await import('../platform.js');
        const text = `${JSON.stringify(await openApiDocument(), null, 2)}\n`;
        const { out } = cmd.opts<{ out?: string }>();
        if (out) await writeFile(out, text);
        // Past a pipe's buffer the write finishes later: wait for it, or the exit below cuts it off.
        else await new Promise((done) => process.stdout.write(text, done));
        return EXIT.ok;
      }),
    );

  program
    .command('completion')
    .description('print a shell completion script')
    .addArgument(new Argument('<shell>', 'the shell').choices(SHELLS))
    .addHelpText(
      'after',
      '\nbash: eval "$(handset completion bash)" in ~/.bashrc; zsh: source <(handset completion zsh) in ~/.zshrc.',
    )
    .action((shell: Shell) => {
      process.stdout.write(completionScript(shell, handsetProgram(), { trigger: Object.keys(SCENARIOS) }));
    });

  return program;
}

function parseRoles(text: string): Role[] {
  const roles = text.split(',').map((r) => r.trim());
  for (const r of roles) {
    if (!(ROLES as readonly string[]).includes(r)) {
      throw new InvalidArgumentError(`unknown role "${r}" (roles: ${ROLES.join(', ')})`);
    }
  }
  return roles as Role[];
}

async function serve(config: Config, log: Logger, cmd: Command) {
  const roles = cmd.opts<{ roles: Role[] }>().roles;
  if (!config.databaseUrl)
    throw new ConfigError('DATABASE_URL', 'is required by handset serve (use handset dev for a local database)');
  const [{ checkRoleConfig, startPlatform }, { carriers }] = await Promise.all([
    import('../platform.js'),
    import('../carrier/registry.js'),
  ]);
  checkRoleConfig(config, carriers(config), roles);
  await assertPortsFree(config.host, [
    ...(roles.includes('api') ? [{ variable: 'HANDSET_API_PORT', port: config.apiPort }] : []),
    ...(roles.includes('ingest') ? [{ variable: 'HANDSET_INGEST_PORT', port: config.ingestPort }] : []),
  ]);
  let starting: Promise<Platform> | undefined;
  onShutdown(log, async () => {
    await (await starting)?.stop();
    log.info('stopped');
  });
  starting = startPlatform({ config, databaseUrl: config.databaseUrl, roles, log });
  await starting;
  return 'running' as const;
}

async function dev(config: Config, _log: Logger, cmd: Command) {
  const other = await runningDev(config.stateDir);
  if (other && other.pid !== process.pid) {
    throw new Error(`handset dev is already running here (pid ${other.pid}, API ${other.apiUrl})`);
  }
  // Before anything starts: a busy port found after PostgreSQL started would leave it to stop.
  await assertPortsFree(config.host, [
    { variable: 'HANDSET_API_PORT', port: config.apiPort },
    { variable: 'HANDSET_INGEST_PORT', port: config.ingestPort },
    { variable: 'HANDSET_SIM_PORT', port: config.simPort },
  ]);
  if (cmd.opts<{ reset?: boolean }>().reset) await rm(config.stateDir, { recursive: true, force: true });
  const logFile = path.join(config.stateDir, 'handset.log');
  const log = createFileLogger(config.logLevel, logFile);
  let starting: Promise<DevHandle> | undefined;
  onShutdown(log, async () => {
    await (await starting)?.stop();
    print('stopped');
  });
  print('Starting Handset (embedded PostgreSQL, migrations, simulator)…');
  // Loading it is part of starting: a signal meanwhile waits for start-up, then stops.
  const loading = import('../dev/dev.js');
  starting = loading.then(({ startDev }) => startDev(config, log, { say: print }));
  const handle = await starting;
  const { devBanner } = await loading;
  await noteStateDir(config.stateDir);
  process.stdout.write(devBanner(handle.state, shortPath(logFile)));
  return 'running' as const;
}

/** A path as a person would type it here: relative below the working directory, else absolute. */
function shortPath(file: string): string {
  const relative = path.relative(process.cwd(), file);
  return relative && !relative.startsWith('..') && !path.isAbsolute(relative) ? relative : file;
}

async function migrateCommand(config: Config, log: Logger) {
  if (!config.databaseUrl) throw new ConfigError('DATABASE_URL', 'is required by handset migrate');
  const { createPool, migrate } = await database();
  const pool = createPool(config.databaseUrl, { max: 2, applicationName: 'handset-migrate', log });
  try {
    const applied = await migrate(pool, log);
    print(applied.length ? `applied: ${applied.join(', ')}` : 'schema is up to date');
    return EXIT.ok;
  } finally {
    await pool.end();
  }
}

/**
 * The database's client and migrations, loaded by the commands that use them: the
 * rest (--help, a usage error, listen, sim) start without loading them.
 */
async function database() {
  const [{ createPool }, { migrate }] = await Promise.all([import('../db/pool.js'), import('../db/migrate.js')]);
  return { createPool, migrate };
}

/** A migrated pool on the accounts' database (see withDatabase) for one command, closed after it. */
async function withAccountsPool<T>(config: Config, log: Logger, command: string, use: (pool: pg.Pool) => Promise<T>) {
  const { createPool, migrate } = await database();
  return withDatabase(config, log, command, async (databaseUrl) => {
    const pool = createPool(databaseUrl, { max: 2, applicationName: 'handset-accounts', log });
    try {
      await migrate(pool, log);
      return await use(pool);
    } finally {
      await pool.end();
    }
  });
}

async function accountsCreate(config: Config, log: Logger, cmd: Command) {
  const { name, json } = cmd.opts<{ name: string; json?: boolean }>();
  const [{ withTx }, { accountCreate, apiKeyCreate }] = await Promise.all([
    import('../db/tx.js'),
    import('../accounts/accounts.js'),
  ]);
  const created = await withAccountsPool(config, log, 'handset accounts create', (pool) =>
    withTx(pool, async (tx) => {
      const account = await accountCreate(tx, name);
      return { account_id: account.id, api_key: (await apiKeyCreate(tx, account.id)).key };
    }),
  );
  if (json) print(JSON.stringify(created));
  else {
    print(`Created account ${created.account_id} (${name}).`);
    print(`API key: ${created.api_key}`);
    print('It is shown only this once (Handset stores a hash of it).');
  }
  return EXIT.ok;
}

async function audit(config: Config, log: Logger, cmd: Command) {
  const io = {
    reconcile: {
      intervalMs: config.reconcileIntervalMs,
      afterMs: config.reconcileAfterMs,
      messageAfterMs: config.reconcileMessageAfterMs,
    },
  };
  return withDatabase(config, log, 'handset audit', (url) => auditDatabase(cmd.opts<AuditFlags>(), url, log, io));
}

/**
 * DATABASE_URL, else the database of the handset dev found for this checkout
 * (findDev): running, or stopped, when its embedded PostgreSQL is started for
 * this command. A line on stderr says which.
 */
async function withDatabase<T>(config: Config, log: Logger, command: string, use: (url: string) => Promise<T>) {
  if (config.databaseUrl) return use(config.databaseUrl);
  const found = await findDev(config.stateDir);
  if (!found.dev) {
    throw new ConfigError('DATABASE_URL', `is required by ${command} (or run it next to handset dev: npm start)`);
  }
  process.stderr.write(`${talkingTo(found)}\n`);
  if (found.running) return use(found.dev.databaseUrl);
  const { startEmbeddedPostgres } = await import('../db/embedded.js');
  const pg = await startEmbeddedPostgres({ stateDir: found.stateDir, log });
  try {
    return await use(pg.url);
  } finally {
    await pg.stop();
  }
}

/**
 * `handset reconcile` against DATABASE_URL and the configured carrier, or next to
 * a running `handset dev`: its database and its simulator.
 */
async function reconcile(config: Config, log: Logger, cmd: Command) {
  const flags = cmd.opts<ReconcileFlags>();
  if (config.databaseUrl) return runReconcile(flags, config, config.databaseUrl, log, print);
  const found = await findDev(config.stateDir);
  if (!found.running || !found.dev) {
    throw new ConfigError('DATABASE_URL', 'is required by handset reconcile (or run it next to a running handset dev)');
  }
  process.stderr.write(`${talkingTo(found)}\n`);
  const dev = found.dev;
  const devConfig: Config = {
    ...config,
    telnyx: { ...config.telnyx, apiUrl: dev.carrier.TELNYX_API_URL, apiKey: dev.carrier.TELNYX_API_KEY },
    twilio: dev.twilioCarrier
      ? {
          accountSid: dev.twilioCarrier.TWILIO_ACCOUNT_SID,
          authToken: dev.twilioCarrier.TWILIO_AUTH_TOKEN,
          apiUrl: dev.twilioCarrier.TWILIO_API_URL,
        }
      : config.twilio,
  };
  return runReconcile(flags, devConfig, dev.databaseUrl, log, print);
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
      process.exit(EXIT.failure);
    }
    stopping = true;
    log.info({ signal }, 'shutting down gracefully');
    stop().then(
      () => process.exit(EXIT.ok),
      (err: Error) => {
        log.error({ err: err.message }, 'shutdown failed');
        process.exit(EXIT.failure);
      },
    );
  };
  process.on('SIGTERM', handler);
  process.on('SIGINT', handler);
}

async function main(argv: string[]): Promise<void> {
  const program = styled(handsetProgram());
  try {
    await program.parseAsync(argv, { from: 'user' });
  } catch (err) {
    if (!(err instanceof CommanderError)) throw err;
    // Commander has printed the help, the version or the usage error; 0 only for the first two.
    process.exit(err.exitCode === 0 ? EXIT.ok : EXIT.usage);
  }
  if (outcome !== 'running') process.exit(outcome);
}

await main(process.argv.slice(2));
