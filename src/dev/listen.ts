// `handset listen [--forward-to URL] [--print-json]`: the local loop users know
// from `stripe listen`. It subscribes a local endpoint to the account's events, verifies
// every delivery it receives (Standard Webhooks: id, timestamp within 5 minutes,
// HMAC-SHA256 signature) and prints it, or forwards it as received to the
// developer's own server. The endpoint and its secret are kept in
// <state dir>/listen.json, so the secret stays the same across runs; the
// endpoint is disabled when listen exits and re-enabled when it starts again.

import { readFile, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { createClient, type HandsetEvent, verificationFailure } from '@handset/client';
import { Command, InvalidArgumentError } from 'commander';
import { nearest } from '../cli/command.js';
import { EVENT_TYPES, type EventType } from '../outbox/outbox.sql.js';
import { networkReason, resolveApi } from './state.js';

interface Saved {
  apiUrl: string;
  endpointId: string;
  secret: string;
}

export interface ListenIo {
  out: (line: string) => void;
  /** Where status lines go when stdout carries only events (--print-json); defaults to out. */
  err?: (line: string) => void;
  /** Resolves when the user stops listening (SIGINT/SIGTERM by default). */
  stopped?: Promise<void>;
}

export interface ListenFlags {
  forwardTo?: string;
  events?: EventType[];
  printJson?: boolean;
  apiUrl?: string;
  apiKey?: string;
  port: number;
}

/** `handset listen`: its flags (no action: the caller attaches one). */
export function listenCommand(): Command {
  return new Command('listen')
    .description('subscribe a local endpoint to your events; verify and print (or forward) every one')
    .option('--forward-to <url>', 'POST every verified event, as received, to your own server')
    .option('--events <types>', 'only these event types, comma-separated (default: all)', eventTypesOf)
    .option('--print-json', 'print each event as received (one JSON document a line) instead of a summary')
    .option('--api-url <url>', 'the Handset API (default: the running handset dev; or HANDSET_API_URL)')
    .option('--api-key <key>', 'its API key (default: the running handset dev’s demo key; or HANDSET_API_KEY)')
    .option('--port <n>', 'local port to receive on (0 = any free port)', port, 0)
    .addHelpText(
      'after',
      [
        '',
        'Each line: ✔ verified (and forwarded with a 2xx), ✘ refused or the forward failed (with its status);',
        '↻ marks a redelivery, a webhook-id seen before. The signing secret stays the same across runs.',
      ].join('\n'),
    );
}

function eventTypesOf(text: string): EventType[] {
  return text.split(',').map((given) => {
    const type = given.trim();
    if ((EVENT_TYPES as readonly string[]).includes(type)) return type as EventType;
    const guess = nearest(type, EVENT_TYPES);
    throw new InvalidArgumentError(`unknown event type "${type}"${guess ? ` — did you mean ${guess}?` : ''}`);
  });
}

function port(text: string): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new InvalidArgumentError('must be a port, 0 to 65535');
  return n;
}

/** How many webhook-ids listen remembers to spot a redelivery. */
const SEEN_IDS = 10_000;

export async function runListen(flags: ListenFlags, stateDir: string, io: ListenIo): Promise<number> {
  const err = io.err ?? io.out;
  const resolved = await resolveApi(stateDir, { apiUrl: flags.apiUrl, apiKey: flags.apiKey });
  const { apiUrl, apiKey } = resolved;
  const forwardTo = flags.forwardTo;
  const eventTypes = flags.events ?? [];
  // Under --print-json stdout carries only the events, so it can be piped; the rest goes to stderr.
  const say = flags.printJson ? err : io.out;
  if (resolved.via) say(resolved.via);
  const api = createClient({ baseUrl: apiUrl, apiKey });

  let secret = '';
  const seen = new Set<string>();
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const failure = verificationFailure(secret, req.headers, body);
      if (failure) {
        say(`✘ refused a request: ${failure}`);
        res.writeHead(400).end();
        return;
      }
      const webhookId = String(req.headers['webhook-id']);
      const again = seen.has(webhookId);
      if (!again) {
        seen.add(webhookId);
        if (seen.size > SEEN_IDS) seen.delete(seen.values().next().value as string);
      }
      const event = JSON.parse(body) as HandsetEvent;
      const line =
        `${new Date().toISOString().slice(11, 19)}  ${event.type.padEnd(18)} ${event.id}  ${describe(event)}` +
        (again ? '  ↻ redelivery' : '');
      if (flags.printJson) io.out(body);
      if (!forwardTo) {
        if (!flags.printJson) say(`✔ ${line}`);
        res.writeHead(200).end();
        return;
      }
      try {
        const forwarded = await fetch(forwardTo, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'webhook-id': webhookId,
            'webhook-timestamp': String(req.headers['webhook-timestamp']),
            'webhook-signature': String(req.headers['webhook-signature']),
          },
          body,
          redirect: 'manual',
        });
        await forwarded.arrayBuffer().catch(() => undefined);
        const ok = forwarded.status >= 200 && forwarded.status < 300;
        say(`${ok ? '✔' : '✘'} ${line}  → ${forwardTo} [${forwarded.status}]`);
        res.writeHead(ok ? 200 : 502).end();
      } catch (e) {
        say(`✘ ${line}  → ${forwardTo} [unreachable: ${networkReason(e)}]`);
        res.writeHead(502).end();
      }
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(flags.port, '127.0.0.1', resolve);
  }).catch((e: NodeJS.ErrnoException) => {
    throw new Error(
      e.code === 'EADDRINUSE' ? `port ${flags.port} is in use; pass another --port (0 = any free port)` : e.message,
    );
  });
  const localUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/webhooks`;

  const file = path.join(resolved.stateDir, 'listen.json');
  const saved = JSON.parse(await readFile(file, 'utf8').catch(() => 'null')) as Saved | null;
  let endpointId: string | null = null;
  if (saved && saved.apiUrl === apiUrl) {
    const patched = await api.PATCH('/v1/webhook_endpoints/{id}', {
      params: { path: { id: saved.endpointId } },
      body: { url: localUrl, enabled: true, event_types: eventTypes },
    });
    if (patched.data) ({ endpointId, secret } = saved);
  }
  if (!endpointId) {
    const created = await api.POST('/v1/webhook_endpoints', {
      body: { url: localUrl, event_types: eventTypes, description: 'handset listen' },
    });
    if (!created.data?.secret) {
      server.close();
      throw new Error(`could not subscribe ${localUrl}: ${JSON.stringify(created.error ?? created.data)}`);
    }
    endpointId = created.data.id;
    secret = created.data.secret;
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
  say(`Ready! Listening for ${eventTypes.length ? eventTypes.join(', ') : 'all events'} on ${localUrl}`);
  say(`Your webhook signing secret is ${secret} (it stays the same across runs). ^C to stop.`);
  if (forwardTo) say(`Forwarding every verified event to ${forwardTo}`);

  await stopped;
  await api
    .PATCH('/v1/webhook_endpoints/{id}', { params: { path: { id: endpointId } }, body: { enabled: false } })
    .catch(() => undefined);
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  say('stopped');
  return 0;
}

function describe(event: HandsetEvent): string {
  const data = event.data as Record<string, unknown>;
  const parts = [String(data['id'] ?? '')];
  if (data['status']) parts.push(String(data['status']));
  if (data['from'] && data['to'])
    parts.push(
      `${String(data['from'])} → ${Array.isArray(data['to']) ? (data['to'] as string[]).join(',') : String(data['to'])}`,
    );
  if (data['duration_seconds']) parts.push(`${String(data['duration_seconds'])} s`);
  return parts.join('  ');
}
