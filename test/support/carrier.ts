// Signing and posting carrier webhooks the way Telnyx does, for tests.

import { generateKeyPairSync, type KeyObject } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { Carriers } from '../../src/carrier/registry.js';
import { telnyxAdapter } from '../../src/carrier/telnyx/adapter.js';
import type { TelnyxClientOptions } from '../../src/carrier/telnyx/client.js';
import { signTelnyxWebhook, telnyxPublicKeyBase64 } from '../../src/carrier/telnyx/signature.js';

export interface TelnyxKeys {
  privateKey: KeyObject;
  publicKeyBase64: string;
}

export function telnyxKeys(): TelnyxKeys {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  return { privateKey, publicKeyBase64: telnyxPublicKeyBase64(publicKey) };
}

export function fixture(name: string): string {
  return readFileSync(new URL(`../fixtures/telnyx/${name}.json`, import.meta.url), 'utf8');
}

export interface PostOptions {
  /** Unix seconds to sign with; defaults to now. */
  timestamp?: number;
  headers?: Record<string, string>;
}

export async function postWebhook(url: string, keys: TelnyxKeys, body: string | Buffer, opts: PostOptions = {}) {
  const ts = opts.timestamp ?? Math.floor(Date.now() / 1000);
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...signTelnyxWebhook(keys.privateKey, ts, body), ...opts.headers },
    body,
  });
  const text = await res.text();
  let json: Record<string, unknown> = {};
  try {
    json = JSON.parse(text) as Record<string, unknown>;
  } catch {
    // non-JSON bodies are asserted on by status alone
  }
  return { status: res.status, json, text };
}

/** A minimal valid Telnyx envelope with the given event id and type. */
export function envelope(id: string, eventType = 'message.finalized', payload: object = {}): string {
  return JSON.stringify({
    data: { event_type: eventType, id, occurred_at: new Date().toISOString(), payload, record_type: 'event' },
    meta: { attempt: 1, delivered_to: 'http://localhost/webhooks/telnyx' },
  });
}

/**
 * The carriers a test's workers talk to: Telnyx, its REST client pointed at the
 * simulator (or at nothing: events are parsed, nothing is sent).
 */
export function telnyxCarriers(rest: TelnyxClientOptions | null = null): Carriers {
  const adapter = telnyxAdapter({ client: rest });
  return new Map([[adapter.name, adapter]]);
}
