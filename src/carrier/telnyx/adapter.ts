// The Telnyx implementation of the carrier seam: webhooks in (Ed25519 over
// "<timestamp>|<body>"), the REST client out, and the events reconciliation writes
// in place of webhooks that never came.

import type { CarrierAdapter } from '../carrier.js';
import { telnyxClient, type TelnyxClientOptions } from './client.js';
import { parseTelnyxEvent, telnyxEnvelope, telnyxEventTypes } from './events.js';
import { telnyxReconciled } from './reconciled.js';
import { telnyxPublicKey, verifyTelnyxSignature } from './signature.js';

export interface TelnyxAdapterOptions {
  /** Base64 of the raw 32-byte Ed25519 public key; without it this process verifies no Telnyx webhook. */
  publicKey?: string | null;
  toleranceSeconds?: number;
  /** Without it (no API key) this process sends nothing to Telnyx. */
  client?: TelnyxClientOptions | null;
}

export function telnyxAdapter(opts: TelnyxAdapterOptions = {}): CarrierAdapter {
  const key = opts.publicKey ? telnyxPublicKey(opts.publicKey) : null;
  const tolerance = opts.toleranceSeconds ?? 300;
  return {
    name: 'telnyx',
    verify: key ? (raw, headers, nowSeconds) => verifyTelnyxSignature(key, raw, headers, nowSeconds, tolerance) : null,
    envelope: telnyxEnvelope,
    parse: parseTelnyxEvent,
    eventTypes: telnyxEventTypes,
    reconciled: telnyxReconciled,
    carriesCalls: true,
    client: opts.client ? telnyxClient(opts.client) : null,
    settings: { verify: 'TELNYX_PUBLIC_KEY', client: 'TELNYX_API_KEY' },
  };
}
