// The receiver's settings: from the environment, or, when DATABASE_URL or
// HANDSET_WEBHOOK_SECRET is unset and a `handset dev` is running, from it: a
// database `inbox_receiver` on dev's PostgreSQL, and a webhook endpoint on dev's
// demo account pointing here (kept in .receiver.json so its secret stays the same,
// disabled while the receiver is stopped, as `handset listen` does with its own).
// Only for trying the example; a real receiver is configured like any service.

import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';

const here = path.dirname(fileURLToPath(import.meta.url));
const DATABASE = 'inbox_receiver';

/** @param {NodeJS.ProcessEnv} env */
export async function settings(env) {
  const port = Number(env.PORT ?? 4000);
  const given = {
    databaseUrl: env.DATABASE_URL,
    secrets: env.HANDSET_WEBHOOK_SECRET?.split(',').map((s) => s.trim()),
  };
  const noop = async () => {};
  if (given.databaseUrl && given.secrets) {
    return { port, databaseUrl: given.databaseUrl, secrets: given.secrets, ready: noop, stopped: noop };
  }
  const stateDir = env.HANDSET_STATE_DIR ?? path.resolve(here, '../../.handset');
  const dev = JSON.parse(await readFile(path.join(stateDir, 'dev.json'), 'utf8').catch(() => 'null'));
  if (!dev) {
    throw new Error(
      `set DATABASE_URL and HANDSET_WEBHOOK_SECRET, or start handset dev first (npm start at the repository root; found no ${path.join(stateDir, 'dev.json')})`,
    );
  }
  const databaseUrl = given.databaseUrl ?? (await devDatabase(dev.databaseUrl));
  if (given.secrets) return { port, databaseUrl, secrets: given.secrets, ready: noop, stopped: noop };

  const api = async (method, route, body) => {
    const res = await fetch(`${dev.apiUrl}${route}`, {
      method,
      headers: { authorization: `Bearer ${dev.apiKey}`, 'content-type': 'application/json' },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    return { ok: res.ok, json: await res.json().catch(() => null) };
  };
  const url = `http://127.0.0.1:${port}/webhooks`;
  const file = path.join(here, '.receiver.json');
  const saved = JSON.parse(await readFile(file, 'utf8').catch(() => 'null'));
  let endpoint = saved?.apiUrl === dev.apiUrl ? saved : null;
  if (endpoint && !(await api('PATCH', `/v1/webhook_endpoints/${endpoint.endpointId}`, { url, enabled: true })).ok) {
    endpoint = null;
  }
  if (!endpoint) {
    const made = await api('POST', '/v1/webhook_endpoints', { url, description: 'examples/inbox-receiver' });
    if (!made.ok) throw new Error(`could not subscribe ${url} at ${dev.apiUrl}: ${JSON.stringify(made.json)}`);
    endpoint = { apiUrl: dev.apiUrl, endpointId: made.json.id, secret: made.json.secret };
    await writeFile(file, JSON.stringify(endpoint), { mode: 0o600 });
  }
  return {
    port,
    databaseUrl,
    secrets: [endpoint.secret],
    ready: async () =>
      console.log(
        `subscribed as ${endpoint.endpointId} on ${dev.apiUrl}; data in ${databaseUrl.replace(/:[^:@/]*@/, ':…@')}`,
      ),
    stopped: async () => {
      await api('PATCH', `/v1/webhook_endpoints/${endpoint.endpointId}`, { enabled: false }).catch(() => undefined);
    },
  };
}

/** The `inbox_receiver` database on dev's PostgreSQL, created the first time. */
async function devDatabase(devUrl) {
  const url = new URL(devUrl);
  const admin = new pg.Client({ connectionString: url.toString() });
  await admin.connect();
  try {
    const { rowCount } = await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [DATABASE]);
    if (!rowCount) await admin.query(`CREATE DATABASE ${DATABASE}`);
  } finally {
    await admin.end();
  }
  url.pathname = `/${DATABASE}`;
  return url.toString();
}
