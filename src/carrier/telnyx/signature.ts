// Telnyx webhook signatures: Ed25519 over the bytes "<telnyx-timestamp>|<raw body>",
// checked with the account's public key (base64 of the raw 32-byte key) and a
// timestamp tolerance in both directions. At least as strict as the official SDK:
// padded base64, a 64-byte signature, digits-only seconds.

import { sign, type KeyObject } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { VerifyFailure } from '../carrier.js';
import { ed25519Key, type Ed25519Engine, type Ed25519Key } from './ed25519.js';

const SIGNATURE_B64 = /^[A-Za-z0-9+/]{86}==$/;
const DIGITS = /^\d{1,15}$/;

export function telnyxPublicKey(base64: string, engine?: Ed25519Engine): Ed25519Key {
  const raw = Buffer.from(base64, 'base64');
  if (raw.length !== 32) throw new Error('a Telnyx public key is the base64 of 32 raw bytes');
  return ed25519Key(raw, engine);
}

export function verifyTelnyxSignature(
  key: Ed25519Key,
  raw: Buffer,
  headers: IncomingHttpHeaders,
  nowSeconds: number,
  toleranceSeconds: number,
): VerifyFailure | null {
  const ts = headers['telnyx-timestamp'];
  const sig = headers['telnyx-signature-ed25519'];
  if (typeof ts !== 'string' || typeof sig !== 'string') return 'missing_signature';
  if (!DIGITS.test(ts) || !SIGNATURE_B64.test(sig)) return 'malformed_signature';
  if (Math.abs(nowSeconds - Number(ts)) > toleranceSeconds) return 'stale_timestamp';
  const signed = Buffer.allocUnsafe(ts.length + 1 + raw.length);
  signed.write(ts, 0, 'latin1');
  signed[ts.length] = 0x7c; // '|'
  raw.copy(signed, ts.length + 1);
  return key.verify(signed, Buffer.from(sig, 'base64')) ? null : 'bad_signature';
}

/** Signs a webhook the way Telnyx does (used by the simulator and tests). */
export function signTelnyxWebhook(privateKey: KeyObject, timestamp: number | string, rawBody: string | Buffer) {
  const ts = String(timestamp);
  const body = typeof rawBody === 'string' ? Buffer.from(rawBody, 'utf8') : rawBody;
  const signature = sign(null, Buffer.concat([Buffer.from(`${ts}|`, 'utf8'), body]), privateKey).toString('base64');
  return { 'telnyx-timestamp': ts, 'telnyx-signature-ed25519': signature };
}

/** The base64 of the raw 32-byte public key, the form Telnyx's portal shows. */
export function telnyxPublicKeyBase64(publicKey: KeyObject): string {
  return publicKey.export({ type: 'spki', format: 'der' }).subarray(12).toString('base64');
}
