// The two Ed25519 verifiers (libsodium, node:crypto) give the official Telnyx
// SDK's answer on every webhook: the recorded fixtures signed properly, and each
// of them tampered, re-timed, signed with another key, with a forged, truncated,
// lengthened or malleated (S + L) signature. No database: pure verification.

import { readdirSync } from 'node:fs';
import { TelnyxWebhook } from 'telnyx/lib/webhooks';
import { describe, expect, it } from 'vitest';
import { ed25519, nodeEd25519, sodiumEd25519, type Ed25519 } from '../../src/carrier/telnyx/ed25519.js';
import { signTelnyxWebhook, telnyxPublicKey, verifyTelnyxSignature } from '../../src/carrier/telnyx/signature.js';
import { fixture, telnyxKeys } from '../support/carrier.js';

const keys = telnyxKeys();
const stranger = telnyxKeys();
const names = readdirSync(new URL('../fixtures/telnyx/', import.meta.url))
  .filter((f) => f.endsWith('.json'))
  .map((f) => f.slice(0, -'.json'.length));

// The order of the Ed25519 group, little-endian: S + L verifies under a lax check.
const L = (1n << 252n) + 27742317777372353535851937790883648493n;
const toLe = (n: bigint) => Buffer.from(n.toString(16).padStart(64, '0'), 'hex').reverse();
const fromLe = (b: Buffer) => BigInt(`0x${Buffer.from(b).reverse().toString('hex')}`);

interface Case {
  name: string;
  body: string;
  headers: Record<string, string>;
}

function cases(): Case[] {
  const now = Math.floor(Date.now() / 1000);
  const out: Case[] = [];
  for (const name of names) {
    const body = fixture(name);
    const good = signTelnyxWebhook(keys.privateKey, now, body);
    const sig = Buffer.from(good['telnyx-signature-ed25519'], 'base64');
    const withSig = (s: Buffer) => ({ ...good, 'telnyx-signature-ed25519': s.toString('base64') });
    const flipped = Buffer.from(sig);
    flipped[10]! ^= 0x01;
    const malleated = Buffer.concat([sig.subarray(0, 32), toLe(fromLe(sig.subarray(32)) + L)]);
    out.push(
      { name: `${name}: good`, body, headers: good },
      { name: `${name}: tampered body`, body: body.replace('"', ' "'), headers: good },
      { name: `${name}: another timestamp`, body, headers: { ...good, 'telnyx-timestamp': String(now - 1) } },
      { name: `${name}: another key`, body, headers: signTelnyxWebhook(stranger.privateKey, now, body) },
      { name: `${name}: one bit of the signature flipped`, body, headers: withSig(flipped) },
      { name: `${name}: forged (zero) signature`, body, headers: withSig(Buffer.alloc(64)) },
      { name: `${name}: short signature`, body, headers: withSig(sig.subarray(0, 63)) },
      { name: `${name}: long signature`, body, headers: withSig(Buffer.concat([sig, Buffer.from([0])])) },
      { name: `${name}: S + L`, body, headers: withSig(malleated) },
    );
  }
  return out;
}

async function sdkAccepts(c: Case): Promise<boolean> {
  return new TelnyxWebhook(keys.publicKeyBase64).verify(c.body, c.headers).then(
    () => true,
    () => false,
  );
}

const ours = (impl: Ed25519, c: Case) =>
  verifyTelnyxSignature(
    telnyxPublicKey(keys.publicKeyBase64, impl),
    Buffer.from(c.body, 'utf8'),
    c.headers,
    Math.floor(Date.now() / 1000),
    300,
  ) === null;

describe('Ed25519 verifiers', () => {
  it('libsodium loads here and is the one in use', () => {
    expect(sodiumEd25519).not.toBeNull();
    expect(ed25519.name).toBe('libsodium');
  });

  it('libsodium, node:crypto and the official SDK accept and refuse the same webhooks', async () => {
    const all = cases();
    const answers = await Promise.all(
      all.map(async (c) => ({
        name: c.name,
        sdk: await sdkAccepts(c),
        sodium: ours(sodiumEd25519!, c),
        node: ours(nodeEd25519, c),
      })),
    );
    for (const a of answers) {
      expect({ name: a.name, sodium: a.sodium, node: a.node }).toEqual({ name: a.name, sodium: a.sdk, node: a.sdk });
    }
    // Every fixture verifies untouched, and only untouched.
    expect(answers.filter((a) => a.sdk).map((a) => a.name)).toEqual(names.map((n) => `${n}: good`));
  });

  it('a signature of any length other than 64 bytes is refused by both, not read in part', () => {
    const message = Buffer.from('1700000000|{}');
    const { privateKey } = keys;
    const sig = Buffer.from(signTelnyxWebhook(privateKey, '1700000000', '{}')['telnyx-signature-ed25519'], 'base64');
    for (const impl of [sodiumEd25519!, nodeEd25519]) {
      const check = telnyxPublicKey(keys.publicKeyBase64, impl);
      expect(check(message, sig)).toBe(true);
      expect(check(message, Buffer.concat([sig, Buffer.alloc(1)]))).toBe(false);
      expect(check(message, sig.subarray(0, 63))).toBe(false);
    }
  });
});
