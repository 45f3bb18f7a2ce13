// Both Ed25519 engines give the same answer as the official Telnyx SDK's verifier
// on the same requests: genuine ones, and every way of getting one wrong (a byte of
// the body, of the signature, another key, another timestamp, a non-canonical or
// all-zero signature), then on random bodies and random damage.

import { generateKeyPairSync } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import fc from 'fast-check';
import { TelnyxWebhook } from 'telnyx/lib/webhooks';
import { describe, expect, it } from 'vitest';
import { DEFAULT_ED25519_ENGINE, ED25519_ENGINES } from '../../src/carrier/telnyx/ed25519.js';
import {
  signTelnyxWebhook,
  telnyxPublicKey,
  telnyxPublicKeyBase64,
  verifyTelnyxSignature,
} from '../../src/carrier/telnyx/signature.js';

const { publicKey, privateKey } = generateKeyPairSync('ed25519');
const other = generateKeyPairSync('ed25519');
const KEY = telnyxPublicKeyBase64(publicKey);
const sdk = new TelnyxWebhook(KEY);
const engines = ED25519_ENGINES.map((engine) => ({ engine, key: telnyxPublicKey(KEY, engine) }));

const FIXTURES = new URL('../fixtures/telnyx/', import.meta.url);
const bodies = readdirSync(FIXTURES).map((f) => JSON.stringify(JSON.parse(readFileSync(new URL(f, FIXTURES), 'utf8'))));

/** The group order L of Ed25519: S + L encodes the same scalar, non-canonically. */
const L = 2n ** 252n + 27742317777372353535851937790883648493n;

function nonCanonical(signature: string): string {
  const bytes = Buffer.from(signature, 'base64');
  const s = BigInt(`0x${Buffer.from(bytes.subarray(32)).reverse().toString('hex')}`) + L;
  const encoded = Buffer.from(s.toString(16).padStart(64, '0'), 'hex').reverse();
  return Buffer.concat([bytes.subarray(0, 32), encoded]).toString('base64');
}

interface Case {
  body: string;
  headers: Record<string, string>;
}

/** Each engine's answer and the SDK's, for one request: true when it verifies. */
async function answers({ body, headers }: Case) {
  const now = Math.floor(Date.now() / 1000);
  const ours = engines.map(({ key }) => verifyTelnyxSignature(key, Buffer.from(body), headers, now, 300) === null);
  const official = await sdk.verify(body, headers).then(
    () => true,
    () => false,
  );
  return { ours, official };
}

const signed = (body: string, ts = Math.floor(Date.now() / 1000)): Case => ({
  body,
  headers: signTelnyxWebhook(privateKey, ts, body),
});

const flipByte = (text: string, at: number) => {
  const b = Buffer.from(text, 'base64');
  b[at % b.length]! ^= 0x01;
  return b.toString('base64');
};

describe('Ed25519 verification', () => {
  it('libsodium loads here, so the fast engine is the one in use', () => {
    expect(DEFAULT_ED25519_ENGINE).toBe('libsodium');
    expect(engines.map((e) => e.key.engine)).toEqual(['libsodium', 'node:crypto']);
  });

  it('a genuine Telnyx webhook verifies on both engines, as the SDK says', async () => {
    for (const body of bodies) expect(await answers(signed(body))).toEqual({ ours: [true, true], official: true });
  });

  it('each way of getting it wrong is refused by both engines and by the SDK', async () => {
    const body = bodies[0]!;
    const good = signed(body);
    const sig = good.headers['telnyx-signature-ed25519']!;
    const wrong: Record<string, Case> = {
      'a byte of the body': { body: body.replace('"', "'"), headers: good.headers },
      'a bit of the signature': { body, headers: { ...good.headers, 'telnyx-signature-ed25519': flipByte(sig, 40) } },
      'a bit of R': { body, headers: { ...good.headers, 'telnyx-signature-ed25519': flipByte(sig, 3) } },
      'another key': { body, headers: signTelnyxWebhook(other.privateKey, good.headers['telnyx-timestamp']!, body) },
      'another timestamp': {
        body,
        headers: { ...good.headers, 'telnyx-timestamp': String(Number(good.headers['telnyx-timestamp']) - 1) },
      },
      'a non-canonical S (S + L)': {
        body,
        headers: { ...good.headers, 'telnyx-signature-ed25519': nonCanonical(sig) },
      },
      'all zeros': {
        body,
        headers: { ...good.headers, 'telnyx-signature-ed25519': Buffer.alloc(64).toString('base64') },
      },
    };
    for (const [what, request] of Object.entries(wrong)) {
      expect({ what, ...(await answers(request)) }).toEqual({ what, ours: [false, false], official: false });
    }
  });

  it('on random bodies, genuine or damaged anywhere, both engines agree with the SDK', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.string({ unit: 'grapheme', maxLength: 400 }),
        fc.option(fc.nat(), { nil: undefined }),
        fc.option(fc.nat(), { nil: undefined }),
        async (text, damageBody, damageSignature) => {
          const body = JSON.stringify({ data: { payload: { text } } });
          const request = signed(body);
          if (damageBody !== undefined) {
            const bytes = Buffer.from(body);
            bytes[damageBody % bytes.length]! ^= 0x20;
            request.body = bytes.toString('utf8');
          }
          if (damageSignature !== undefined) {
            request.headers['telnyx-signature-ed25519'] = flipByte(
              request.headers['telnyx-signature-ed25519']!,
              damageSignature,
            );
          }
          const { ours, official } = await answers(request);
          expect(ours).toEqual([official, official]);
        },
      ),
      { numRuns: 300 },
    );
  });
});
