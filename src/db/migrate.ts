// Applies the numbered plain-SQL migrations in src/db/migrations, then
// graphile-worker's own schema. Safe when several processes start at once: the
// whole run holds one session advisory lock, so the second process waits and then
// finds nothing left to do.

import { readdir, readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { runMigrations } from 'graphile-worker';
import { workerLogger } from '../jobs/logger.js';
import type { Logger } from '../telemetry/log.js';

// Resolves to src/db/migrations both from src/db (tests) and from dist/db (built).
const MIGRATIONS_DIR = fileURLToPath(new URL('../../src/db/migrations/', import.meta.url));
// An arbitrary constant that names "handset schema migration" among advisory locks.
const MIGRATION_LOCK = 7_358_172_001;

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

export async function loadMigrations(): Promise<Migration[]> {
  const files = (await readdir(MIGRATIONS_DIR)).filter((f) => /^\d{4}_.+\.sql$/.test(f)).sort();
  return Promise.all(
    files.map(async (file) => ({
      version: Number(file.slice(0, 4)),
      name: file.replace(/\.sql$/, ''),
      sql: await readFile(MIGRATIONS_DIR + file, 'utf8'),
    })),
  );
}

/** Returns the names of the migrations this call applied. */
export async function migrate(pool: pg.Pool, log: Logger): Promise<string[]> {
  const migrations = await loadMigrations();
  const client = await pool.connect();
  const applied: string[] = [];
  try {
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK]);
    await client.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
    const done = new Set(
      (await client.query<{ version: number }>('SELECT version FROM schema_migrations')).rows.map((r) => r.version),
    );
    for (const m of migrations) {
      if (done.has(m.version)) continue;
      await client.query('BEGIN');
      try {
        await client.query(m.sql);
        await client.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [m.version, m.name]);
        await client.query('COMMIT');
      } catch (err) {
        await client.query('ROLLBACK');
        throw new Error(`migration ${m.name} failed: ${(err as Error).message}`, { cause: err });
      }
      applied.push(m.name);
      log.info({ migration: m.name }, 'applied migration');
    }
    await runMigrations({ pgPool: pool, logger: workerLogger(log) });
  } finally {
    await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK]).catch(() => undefined);
    client.release();
  }
  return applied;
}
