// Configuration errors name the variable and never print a credential: a
// DATABASE_URL (or any other URL variable) that does not parse is shown with its
// password replaced. And the new security settings have their documented
// defaults and refuse bad values.

import { describe, expect, it } from 'vitest';
import { loadConfig, parseSize, redactCredentials } from '../../src/config.js';
import { runHandset } from '../support/process.js';

const SECRET = 's3cret-Pw';

describe('configuration errors', () => {
  it.each([
    ['DATABASE_URL', `postgres://handset:${SECRET}@db.example.com:notaport/handset`],
    ['DATABASE_URL', `mysql://handset:${SECRET}@db.example.com/handset`],
    ['DATABASE_URL', `postgres://handset:${SECRET}/with@slash@db.example.com:5432x/handset`],
    ['DATABASE_URL', `postgres://handset:${SECRET}@@db:bad/x?sslpassword=${SECRET}`],
    ['DATABASE_URL', `host=db.example.com user=handset password=${SECRET}`],
    ['TELNYX_API_URL', `https://user:${SECRET}@api.example.com:99999/v2`],
    ['TELNYX_API_URL', `ftp://${SECRET}@api.example.com/v2`],
  ])(
    'a bad %s with a password stops start-up with one line that names it and hides the password',
    async (variable, value) => {
      const r = await runHandset(['serve'], { DATABASE_URL: 'postgres://127.0.0.1:1/x', [variable]: value });
      expect(r.code).toBe(2);
      const lines = r.output.trim().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(new RegExp(`^handset: configuration error: ${variable}: `));
      expect(r.output).not.toContain(SECRET);
      expect(r.output).toContain('***');
    },
  );

  it('redaction keeps what helps to diagnose: scheme, user, host, port, path', () => {
    expect(redactCredentials('postgres://handset:pw@db.example.com:5x/handset?sslmode=require&password=pw')).toBe(
      'postgres://handset:***@db.example.com:5x/handset?sslmode=require&password=***',
    );
    expect(redactCredentials('must be a URL, got "https://tok@h/x"')).toBe('must be a URL, got "https://***@h/x"');
    expect(redactCredentials('postgres://db.example.com/handset')).toBe('postgres://db.example.com/handset');
  });
});

describe('security settings', () => {
  it('have their documented defaults', () => {
    const c = loadConfig({}, 'serve');
    expect(c).toMatchObject({
      ingestBodyLimit: 256 * 1024,
      maxConnections: { ingest: 256, api: 1024 },
      ingestQueueLimit: 400,
      databaseTimeouts: {
        ingest: { statementMs: 1000, lockMs: 500 },
        api: { statementMs: 5000, lockMs: 2000 },
        worker: { statementMs: 30_000, lockMs: 10_000 },
      },
      metricsToken: null,
    });
    // ingest answers within the carrier's 2 s deadline even when its write waits for a lock
    expect(c.databaseTimeouts.ingest.statementMs).toBeLessThan(2000);
    expect(['262144', '256KiB', '1MiB', '12 ', 'x', '1.5KiB', '-1'].map(parseSize)).toEqual([
      262144,
      262144,
      1048576,
      12,
      null,
      null,
      null,
    ]);
  });

  it.each([
    [{ HANDSET_INGEST_BODY_LIMIT: '100' }, 'HANDSET_INGEST_BODY_LIMIT'],
    [{ HANDSET_INGEST_BODY_LIMIT: '1GiB' }, 'HANDSET_INGEST_BODY_LIMIT'],
    [{ HANDSET_INGEST_MAX_CONNECTIONS: '0' }, 'HANDSET_INGEST_MAX_CONNECTIONS'],
    [{ HANDSET_API_MAX_CONNECTIONS: 'many' }, 'HANDSET_API_MAX_CONNECTIONS'],
    [{ HANDSET_INGEST_QUEUE_LIMIT: '-1' }, 'HANDSET_INGEST_QUEUE_LIMIT'],
    [{ HANDSET_INGEST_STATEMENT_TIMEOUT: 'soon' }, 'HANDSET_INGEST_STATEMENT_TIMEOUT'],
    [{ HANDSET_API_LOCK_TIMEOUT: '10s' }, 'HANDSET_API_LOCK_TIMEOUT'], // longer than the API's statement timeout
    [{ HANDSET_WORKER_LOCK_TIMEOUT: '-1s' }, 'HANDSET_WORKER_LOCK_TIMEOUT'],
    [{ HANDSET_METRICS_TOKEN: 'short' }, 'HANDSET_METRICS_TOKEN'],
    [{ HANDSET_METRICS_TOKEN: 'a token with spaces in it' }, 'HANDSET_METRICS_TOKEN'],
  ])('%o is refused, naming %s', (env, variable) => {
    expect(() => loadConfig(env, 'serve')).toThrow(new RegExp(`^${variable}: `));
  });

  it('0 turns a database timeout off', () => {
    expect(
      loadConfig({ HANDSET_WORKER_STATEMENT_TIMEOUT: '0', HANDSET_WORKER_LOCK_TIMEOUT: '0s' }, 'serve'),
    ).toMatchObject({ databaseTimeouts: { worker: { statementMs: 0, lockMs: 0 } } });
  });
});
