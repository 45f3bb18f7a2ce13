// Ingest's connection cap (HANDSET_INGEST_MAX_CONNECTIONS): past it a new
// connection is closed as soon as it is accepted. What a refusal may take down
// besides: keep-alive connections idle long enough to be a client's leftovers,
// so that they do not hold the cap; not a connection a sender used a moment ago,
// which it may be reusing for its next webhook at that very moment (and a POST
// that dies on a closing socket is a failed delivery to the carrier).

import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Platform } from '../../src/platform.js';
import { telnyxKeys } from '../support/carrier.js';
import { createTestDatabase, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';

const CAP = 3;
let db: TestDatabase;
let platform: Platform;
let port: number;

beforeAll(async () => {
  db = await createTestDatabase();
  platform = await startTestPlatform({
    databaseUrl: db.url,
    roles: ['ingest'],
    keys: telnyxKeys(),
    env: { HANDSET_INGEST_MAX_CONNECTIONS: String(CAP) },
  });
  port = Number(new URL(platform.ingestUrl!).port);
});
afterAll(async () => {
  await platform?.stop();
  await db.drop();
});

/** A raw keep-alive connection that asks GET /readyz when told and reads one answer at a time. */
async function keepAlive() {
  const socket = net.connect({ port, host: '127.0.0.1' });
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  let closed = false;
  socket.on('close', () => {
    closed = true;
  });
  socket.on('error', () => undefined);
  return {
    get closed() {
      return closed;
    },
    /** The status line of the answer, or null when the connection closed first. */
    async ask(): Promise<string | null> {
      if (closed) return null;
      return new Promise((resolve) => {
        let got = '';
        const onData = (chunk: Buffer) => {
          got += chunk.toString('latin1');
          if (/\r\n\r\n/.test(got) && /content-length: (\d+)/i.test(got)) {
            const length = Number(/content-length: (\d+)/i.exec(got)![1]);
            if (got.length >= got.indexOf('\r\n\r\n') + 4 + length) done(got.split('\r\n')[0]!);
          }
        };
        const onClose = () => done(null);
        const done = (r: string | null) => {
          socket.off('data', onData);
          socket.off('close', onClose);
          resolve(r);
        };
        socket.on('data', onData);
        socket.once('close', onClose);
        socket.write(`GET /readyz HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`);
      });
    },
    destroy: () => socket.destroy(),
  };
}

/**
 * A keep-alive connection that has been answered once: tried again while the
 * server still counts connections the client has closed (it sees them go a moment later).
 */
async function admitted() {
  for (let attempt = 0; ; attempt++) {
    const c = await keepAlive();
    if ((await c.ask()) === 'HTTP/1.1 200 OK') return c;
    c.destroy();
    if (attempt === 50) throw new Error('no connection admitted below the cap');
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Opens a connection past the cap: it is accepted and closed at once. */
async function refused(): Promise<boolean> {
  const c = await keepAlive().catch(() => null);
  if (!c) return true;
  for (let waited = 0; !c.closed && waited < 3000; waited += 50) await new Promise((r) => setTimeout(r, 50));
  const closed = c.closed;
  c.destroy();
  return closed;
}

describe('ingest at its connection cap', () => {
  it('a refused connection does not close a keep-alive connection a sender used a moment ago', async () => {
    const held = [];
    for (let i = 0; i < CAP; i++) held.push(await admitted());
    expect(await refused()).toBe(true);
    // Each sender's next webhook on its open connection is answered.
    for (const c of held) expect(await c.ask()).toBe('HTTP/1.1 200 OK');
    for (const c of held) c.destroy();
  });

  it('a refusal closes the keep-alive connections idle for long, and the next connection is taken', async () => {
    const stale = [];
    for (let i = 0; i < CAP; i++) stale.push(await admitted());
    await new Promise((r) => setTimeout(r, 5_500));
    expect(await refused()).toBe(true);
    for (let waited = 0; stale.some((c) => !c.closed) && waited < 3000; waited += 50)
      await new Promise((r) => setTimeout(r, 50));
    expect(stale.map((c) => c.closed)).toEqual(stale.map(() => true));
    (await admitted()).destroy();
  });
});
