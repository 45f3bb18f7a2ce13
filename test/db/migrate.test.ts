// Migrations: numbered SQL applied once, safely when several processes start at once.

import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { loadMigrations } from '../../src/db/migrate.js';
import { withTx } from '../../src/db/tx.js';
import { withDatabase } from '../../src/db/databases.js';
import { createTestDatabase } from '../support/db.js';
import { runHandset } from '../support/process.js';

const created: string[] = [];
afterAll(async () => {
  const admin = new pg.Client({ connectionString: inject('adminUrl') });
  await admin.connect();
  for (const name of created) await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await admin.end();
});

async function emptyDatabase(): Promise<string> {
  const name = `handset_t_${inject('templateDb').replace('handset_tpl_', '')}_empty_${randomBytes(3).toString('hex')}`;
  const admin = new pg.Client({ connectionString: inject('adminUrl') });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  created.push(name);
  return withDatabase(inject('adminUrl'), name);
}

describe('migrate', () => {
  it('three `handset migrate` processes racing on an empty database leave one correct schema', async () => {
    const url = await emptyDatabase();
    const results = await Promise.all([1, 2, 3].map(() => runHandset(['migrate'], { DATABASE_URL: url })));
    expect(results.map((r) => r.code)).toEqual([0, 0, 0]);
    expect(results.filter((r) => r.output.includes('applied:'))).toHaveLength(1);
    expect(results.filter((r) => r.output.includes('schema is up to date'))).toHaveLength(2);

    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const versions = (await client.query('SELECT version FROM schema_migrations ORDER BY version')).rows.map(
        (r) => r.version,
      );
      expect(versions).toEqual((await loadMigrations()).map((m) => m.version));
      const { rows } = await client.query(
        `SELECT to_regclass('carrier_events') AS t, to_regproc('graphile_worker.add_job') AS f`,
      );
      expect(rows[0]).toEqual({ t: 'carrier_events', f: 'graphile_worker.add_job' });
    } finally {
      await client.end();
    }
  });

  it('a migrated database migrates again as a no-op', async () => {
    const db = await createTestDatabase();
    try {
      const r = await runHandset(['migrate'], { DATABASE_URL: db.url });
      expect(r.code).toBe(0);
      expect(r.output).toContain('schema is up to date');
    } finally {
      await db.drop();
    }
  });
});

describe('withTx', () => {
  it('nests with savepoints: an inner failure rolls back only the inner work', async () => {
    const db = await createTestDatabase();
    try {
      await db.pool.query('CREATE TABLE t (v text)');
      await withTx(db.pool, async (tx) => {
        await tx.query(`INSERT INTO t VALUES ('outer')`);
        await expect(
          withTx(tx, async (inner) => {
            await inner.query(`INSERT INTO t VALUES ('inner')`);
            throw new Error('inner fails');
          }),
        ).rejects.toThrow('inner fails');
        await withTx(tx, async (inner) => inner.query(`INSERT INTO t VALUES ('inner ok')`));
      });
      expect((await db.pool.query('SELECT v FROM t ORDER BY v')).rows.map((r) => r.v)).toEqual(['inner ok', 'outer']);

      await expect(
        withTx(db.pool, async (tx) => {
          await tx.query(`INSERT INTO t VALUES ('doomed')`);
          throw new Error('outer fails');
        }),
      ).rejects.toThrow('outer fails');
      expect((await db.pool.query('SELECT count(*)::int AS n FROM t')).rows[0].n).toBe(2);
    } finally {
      await db.drop();
    }
  });
});
