// `handset listen [--forward-to URL]`: the local loop users know from `stripe
// listen`. It subscribes a local endpoint to the account's events, verifies
// every delivery it receives (Standard Webhooks: id, timestamp within 5 minutes,
// HMAC-SHA256 signature) and prints it, or forwards it as received to the
// developer's own server. The endpoint and its secret are kept in
// <state dir>/listen.json, so the secret stays the same across runs; the
// endpoint is disabled when listen exits and re-enabled when it starts again.

import { timingSafeEqual } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { signPayload } from '../delivery/signature.js';
import { resolveApi } from './state.js';

const TOLERANCE_SECONDS = 300;

interface Saved {
  apiUrl: string;
  endpointId: string;
  secret: string;
}

export interface ListenIo {
  out: (line: string) => void;
  /** Resolves when the user stops listening (SIGINT/SIGTERM by default). */
  stopped?: Promise<void>;
}

/** Verifies a Standard Webhooks request; returns the reason it fails, or null. */
export function verifyWebhook(
  secret: string,
  headers: http.IncomingHttpHeaders,
  body: string,
  nowSeconds: number,
): string | null {
  const id = headers['webhook-id'];
  const ts = headers['webhook-timestamp'];
  const sig = headers['webhook-signature'];
  if (typeof id !== 'string' || typeof ts !== 'string' || typeof sig !== 'string') return 'missing webhook headers';
  if (!/^\d+$/.test(ts) || Math.abs(nowSeconds - Number(ts)) > TOLERANCE_SECONDS) return 'timestamp out of tolerance';
  const expected = Buffer.from(signPayload(secret, id, Number(ts), body));
  const match = sig.split(' ').some((s) => {
    const given = Buffer.from(s);
    return given.length === expected.length && timingSafeEqual(given, expected);
  });
  return match ? null : 'no matching signature';
}

export async function runListen(args: string[], stateDir: string, io: ListenIo): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      'forward-to': { type: 'string' },
      events: { type: 'string' },
      'api-url': { type: 'string' },
      'api-key': { type: 'string' },
      port: { type: 'string' },
    },
  });
  const { apiUrl, apiKey } = await resolveApi(stateDir, { apiUrl: values['api-url'], apiKey: values['api-key'] });
  const forwardTo = values['forward-to'];
  const eventTypes = values.events ? values.events.split(',').map((e) => e.trim()) : [];
  const api = async (method: string, p: string, body?: unknown) => {
    const res = await fetch(apiUrl + p, {
      method,
      headers: { authorization: `Bearer ${apiKey}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      ...(body ? { body: JSON.stringify(body) } : {}),
    });
    const json = (await res.json().catch(() => null)) as Record<string, unknown> | null;
    return { status: res.status, json };
  };

  let secret = '';
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const failure = verifyWebhook(secret, req.headers, body, Math.floor(Date.now() / 1000));
      if (failure) {
        io.out(`✘ refused a request: ${failure}`);
        res.writeHead(400).end();
        return;
      }
      const event = JSON.parse(body) as { id: string; type: string; data: Record<string, unknown> };
      const line = `${new Date().toISOString().slice(11, 19)}  ${event.type.padEnd(18)} ${event.id}  ${describe(event.data)}`;
      if (!forwardTo) {
        io.out(`✔ ${line}`);
        res.writeHead(200).end();
        return;
      }
      try {
        const forwarded = await fetch(forwardTo, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'webhook-id': String(req.headers['webhook-id']),
            'webhook-timestamp': String(req.headers['webhook-timestamp']),
            'webhook-signature': String(req.headers['webhook-signature']),
          },
          body,
          redirect: 'manual',
        });
        io.out(`✔ ${line}  → ${forwardTo} [${forwarded.status}]`);
        res.writeHead(forwarded.status >= 200 && forwarded.status < 300 ? 200 : 502).end();
      } catch (err) {
        io.out(`✔ ${line}  → ${forwardTo} [unreachable: ${(err as Error).message}]`);
        res.writeHead(502).end();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(Number(values.port ?? 0), '127.0.0.1', resolve));
  const localUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/webhooks`;

  const file = path.join(stateDir, 'listen.json');
  const saved = JSON.parse(await readFile(file, 'utf8').catch(() => 'null')) as Saved | null;
  let endpointId: string | null = null;
  if (saved && saved.apiUrl === apiUrl) {
    const patched = await api('PATCH', `/v1/webhook_endpoints/${saved.endpointId}`, {
      url: localUrl,
      enabled: true,
      event_types: eventTypes,
    });
    if (patched.status === 200) ({ endpointId, secret } = saved);
  }
  if (!endpointId) {
    const created = await api('POST', '/v1/webhook_endpoints', {
      url: localUrl,
      event_types: eventTypes,
      description: 'handset listen',
    });
    if (created.status !== 201 || !created.json) {
      server.close();
      throw new Error(`could not subscribe ${localUrl}: ${JSON.stringify(created.json)}`);
    }
    endpointId = String(created.json['id']);
    secret = String(created.json['secret']);
    await writeFile(file, JSON.stringify({ apiUrl, endpointId, secret } satisfies Saved), { mode: 0o600 });
  }

  // Listen for the stop signal before saying we are ready: a ^C sent on the
  // ready line must stop us cleanly, not hit Node's default handler.
  const stopped =
    io.stopped ??
    new Promise<void>((resolve) => {
      process.once('SIGINT', () => resolve());
      process.once('SIGTERM', () => resolve());
    });
  io.out(`Ready! Listening for ${eventTypes.length ? eventTypes.join(', ') : 'all events'} on ${localUrl}`);
  io.out(`Your webhook signing secret is ${secret} (it stays the same across runs). ^C to stop.`);
  if (forwardTo) io.out(`Forwarding every verified event to ${forwardTo}`);

  await stopped;
  await api('PATCH', `/v1/webhook_endpoints/${endpointId}`, { enabled: false }).catch(() => undefined);
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  return 0;
}

function describe(data: Record<string, unknown>): string {
  const parts = [String(data['id'] ?? '')];
  if (data['status']) parts.push(String(data['status']));
  if (data['from'] && data['to'])
    parts.push(
      `${String(data['from'])} → ${Array.isArray(data['to']) ? (data['to'] as string[]).join(',') : String(data['to'])}`,
    );
  if (data['duration_seconds']) parts.push(`${String(data['duration_seconds'])} s`);
  return parts.join('  ');
}
