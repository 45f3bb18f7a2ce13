// Once per test run: a PostgreSQL to test against (DATABASE_URL when set, else an
// embedded one in a temporary directory) and a migrated template database that
// every test file clones (CREATE DATABASE … TEMPLATE), so each file has its own
// database with commits, LISTEN and concurrency of its own.

import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../src/db/embedded.js';
import { createDatabase, dropDatabase } from '../../src/db/databases.js';
import { migrate } from '../../src/db/migrate.js';
import { createPool } from '../../src/db/pool.js';
import { createLogger } from '../../src/telemetry/log.js';

declare module 'vitest' {
  export interface ProvidedContext {
    adminUrl: string;
    templateDb: string;
  }
}

export default async function setup(project: TestProject) {
  const log = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');
  let embedded: EmbeddedPostgres | null = null;
  let stateDir: string | null = null;
  let adminUrl = process.env.DATABASE_URL;
  if (!adminUrl) {
    stateDir = await mkdtemp(path.join(tmpdir(), 'handset-test-'));
    embedded = await startEmbeddedPostgres({ stateDir, log, durable: false, maxConnections: 500 });
    adminUrl = embedded.url;
  }
  const runId = `${process.pid}_${Date.now().toString(36)}`;
  const templateDb = `handset_tpl_${runId}`;
  const pool = createPool(await createDatabase(adminUrl, templateDb), {
    max: 2,
    applicationName: 'handset-test-setup',
  });
  await migrate(pool, log);
  await pool.end();

  project.provide('adminUrl', adminUrl);
  project.provide('templateDb', templateDb);

  return async () => {
    // Drop the template and any database a crashed test file left behind.
    const admin = new pg.Client({ connectionString: adminUrl });
    await admin.connect();
    const { rows } = await admin.query<{ datname: string }>(`SELECT datname FROM pg_database WHERE datname LIKE $1`, [
      `handset_%${runId}%`,
    ]);
    await admin.end();
    for (const { datname } of rows) await dropDatabase(adminUrl!, datname);
    if (embedded) await embedded.stop();
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  };
}
