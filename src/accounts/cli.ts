// `handset accounts keys create|list|revoke`: an operator's hands on an account's
// API keys, for when the account has none left to call the API with (or one has
// leaked). The same functions as the API's routes, on a pool the command opens:
// a revoke here reaches every running API process the same way (NOTIFY).

import { Argument, Command } from 'commander';
import type pg from 'pg';
import { withTx } from '../db/tx.js';
import { apiKeyCreate, apiKeyResource, apiKeyRevokeGuarded } from './accounts.js';
import { accountExists, apiKeyList } from './accounts.sql.js';

const WHERE = '\nWrites to DATABASE_URL, else to the database of this checkout’s handset dev.';

export interface KeysCreateFlags {
  account: string;
  name?: string;
  json?: boolean;
}
export interface KeysListFlags {
  account: string;
  json?: boolean;
}
export interface KeysRevokeFlags {
  account: string;
  force?: boolean;
  json?: boolean;
}

/** `handset accounts keys`: its subcommands and their flags (no actions: the caller attaches them). */
export function keysCommands(): { keys: Command; create: Command; list: Command; revoke: Command } {
  const keys = new Command('keys').description('manage an account’s API keys');
  const create = keys
    .command('create')
    .description('make another API key for an account (shown once, stored hashed)')
    .requiredOption('--account <id>', 'the account (acct_…)')
    .option('--name <name>', 'a name to tell the key apart by')
    .option('--json', 'print the key as JSON, with its secret')
    .addHelpText('after', WHERE);
  const list = keys
    .command('list')
    .description('list an account’s live API keys (never their secrets)')
    .requiredOption('--account <id>', 'the account (acct_…)')
    .option('--json', 'print {"data": [...]} as JSON')
    .addHelpText('after', WHERE.replace('Writes to', 'Reads'));
  const revoke = keys
    .command('revoke')
    .description('revoke an API key at once, in every running API process')
    .addArgument(new Argument('<key-id>', 'the key (key_…)'))
    .requiredOption('--account <id>', 'the account the key belongs to (acct_…)')
    .option('--force', 'revoke it even when it is the account’s last key that does not expire')
    .option('--json', 'print {"id", "deleted"} as JSON')
    .addHelpText('after', WHERE);
  return { keys, create, list, revoke };
}

type Print = (line: string) => void;

async function knownAccount(pool: pg.Pool, id: string): Promise<void> {
  if (!(await accountExists(pool, id))) throw new Error(`no account ${id} (handset accounts create makes one)`);
}

export async function keysCreate(pool: pg.Pool, flags: KeysCreateFlags, print: Print): Promise<void> {
  await knownAccount(pool, flags.account);
  const made = await withTx(pool, (tx) => apiKeyCreate(tx, flags.account, { name: flags.name ?? null }));
  if (flags.json) print(JSON.stringify({ ...apiKeyResource(made.row), secret: made.key }));
  else {
    print(`Created API key ${made.id}${flags.name ? ` (${flags.name})` : ''} for ${flags.account}.`);
    print(`API key: ${made.key}`);
    print('It is shown only this once (Handset stores a hash of it).');
  }
}

export async function keysList(pool: pg.Pool, flags: KeysListFlags, print: Print): Promise<void> {
  await knownAccount(pool, flags.account);
  const keys = [];
  const now = new Date();
  for (let after: string | null = null; ; ) {
    const rows = await apiKeyList(pool, flags.account, 100, after, now);
    keys.push(...rows.slice(0, 100).map(apiKeyResource));
    if (rows.length <= 100) break;
    after = rows[99]!.id;
  }
  if (flags.json) {
    print(JSON.stringify({ data: keys }));
    return;
  }
  if (keys.length === 0) {
    print(`${flags.account} has no live API keys (handset accounts keys create --account ${flags.account})`);
    return;
  }
  const table = [['id', 'name', 'created', 'last used', 'expires']].concat(
    keys.map((k) => [k.id, k.name ?? '-', k.created_at, k.last_used_at ?? 'never', k.expires_at ?? 'never']),
  );
  const widths = table[0]!.map((_, i) => Math.max(...table.map((row) => row[i]!.length)));
  for (const row of table)
    print(
      row
        .map((cell, i) => cell.padEnd(widths[i]!))
        .join('  ')
        .trimEnd(),
    );
}

export async function keysRevoke(pool: pg.Pool, keyId: string, flags: KeysRevokeFlags, print: Print): Promise<void> {
  const result = await withTx(pool, (tx) =>
    apiKeyRevokeGuarded(tx, flags.account, keyId, { force: flags.force === true, now: new Date() }),
  );
  if (!result.applied && result.reason === 'not_found') {
    throw new Error(`${flags.account} has no live API key ${keyId} (handset accounts keys list shows its keys)`);
  }
  if (!result.applied) {
    throw new Error(
      `${keyId} is ${flags.account}'s last key that does not expire: make another first, or pass --force to revoke it anyway`,
    );
  }
  if (flags.json) print(JSON.stringify({ id: keyId, deleted: true }));
  else print(`Revoked ${keyId}: it is refused from now on.`);
}
