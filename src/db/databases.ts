// Scratch databases on a PostgreSQL server, for tools and tests that must not
// touch anyone else's data (the chaos run, the bench, the test suite): created
// by name (optionally from a template), dropped by force, addressed by URL.

import pg from 'pg';

/** The same server's URL, pointing at another database. */
export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

/** The same server's URL on another port (a proxy in front of it, a standby beside it). */
export function withPort(url: string, port: number): string {
  const u = new URL(url);
  u.port = String(port);
  return u.toString();
}

/** One statement on its own connection to `serverUrl`, opened and closed around it; its rows. */
export async function onServer(serverUrl: string, sql: string): Promise<Record<string, unknown>[]> {
  const client = new pg.Client({ connectionString: serverUrl });
  await client.connect();
  try {
    return (await client.query(sql)).rows;
  } finally {
    await client.end();
  }
}

const identifier = (name: string) => {
  if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`not a plain database name: ${name}`);
  return name;
};

/** Creates the database and returns its URL. */
export async function createDatabase(serverUrl: string, name: string, template?: string): Promise<string> {
  await onServer(
    serverUrl,
    `CREATE DATABASE ${identifier(name)}${template ? ` TEMPLATE ${identifier(template)}` : ''}`,
  );
  return withDatabase(serverUrl, name);
}

/** Drops the database, disconnecting whoever is still connected. */
export async function dropDatabase(serverUrl: string, name: string): Promise<void> {
  await onServer(serverUrl, `DROP DATABASE IF EXISTS ${identifier(name)} WITH (FORCE)`);
}
