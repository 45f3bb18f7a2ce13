// A database of its own for one test file, cloned from the migrated template.

import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { inject } from 'vitest';
import { createPool } from '../../src/db/pool.js';
import { createDatabase, dropDatabase } from '../../src/db/databases.js';

export interface TestDatabase {
  name: string;
  url: string;
  pool: pg.Pool;
  drop(): Promise<void>;
}

export async function createTestDatabase(): Promise<TestDatabase> {
  const adminUrl = inject('adminUrl');
  const template = inject('templateDb');
  const name = `handset_t_${template.replace('handset_tpl_', '')}_${randomBytes(4).toString('hex')}`;
  const url = await createDatabase(adminUrl, name, template);
  const pool = createPool(url, { max: 10, applicationName: 'handset-test' });
  return {
    name,
    url,
    pool,
    async drop() {
      await pool.end();
      await dropDatabase(adminUrl, name);
    },
  };
}

/** Polls until fn returns a truthy value (or throws after timeoutMs). */
export async function eventually<T>(
  fn: () => Promise<T | null | undefined | false>,
  timeoutMs = 15_000,
  stepMs = 50,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline)
      throw new Error(`condition not met within ${timeoutMs} ms${last ? `: ${String(last)}` : ''}`);
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

export async function count(db: pg.Pool, sql: string, values: unknown[] = []): Promise<number> {
  const { rows } = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM (${sql}) q`, values);
  return rows[0]!.n;
}
