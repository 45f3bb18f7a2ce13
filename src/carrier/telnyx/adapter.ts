// The Telnyx implementation of the carrier seam for incoming webhooks (and the
// events reconciliation writes in their place).

import type { KeyObject } from 'node:crypto';
import type { CarrierAdapter } from '../carrier.js';
import { parseTelnyxEvent, telnyxEnvelope, telnyxEventTypes } from './events.js';
import { telnyxReconciled } from './reconciled.js';
import { telnyxPublicKey, verifyTelnyxSignature } from './signature.js';

export interface TelnyxAdapterOptions {
  /** Needed only where webhooks are verified (the ingest role). */
  publicKey?: string | null;
  toleranceSeconds?: number;
}

export function telnyxAdapter(opts: TelnyxAdapterOptions = {}): CarrierAdapter {
  const key: KeyObject | null = opts.publicKey ? telnyxPublicKey(opts.publicKey) : null;
  const tolerance = opts.toleranceSeconds ?? 300;
  return {
    name: 'telnyx',
    verify(raw, headers, nowSeconds) {
      if (!key) throw new Error('TELNYX_PUBLIC_KEY is not configured');
      return verifyTelnyxSignature(key, raw, headers, nowSeconds, tolerance);
    },
    envelope: telnyxEnvelope,
    parse: parseTelnyxEvent,
    eventTypes: telnyxEventTypes,
    reconciled: telnyxReconciled,
  };
}
