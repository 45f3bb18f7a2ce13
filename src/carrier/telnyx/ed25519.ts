// Ed25519 signature checks for carrier webhooks, the one CPU cost ingest pays per
// request: libsodium (sodium-native's prebuilt binary) when it loads on this
// machine, else node:crypto, whose per-call overhead in OpenSSL 3 is about twice
// libsodium's. Both answer the same (test/carrier/ed25519.test.ts, with the
// official Telnyx SDK's verifier as the oracle); the engine in use is logged at start.

import { createPublicKey, verify } from 'node:crypto';
import { createRequire } from 'node:module';

export const ED25519_ENGINES = ['libsodium', 'node:crypto'] as const;
export type Ed25519Engine = (typeof ED25519_ENGINES)[number];

interface Sodium {
  crypto_sign_verify_detached(signature: Buffer, message: Buffer, publicKey: Buffer): boolean;
}

function loadSodium(): Sodium | null {
  try {
    return createRequire(import.meta.url)('sodium-native') as Sodium;
  } catch {
    return null; // no prebuilt binary for this platform: node:crypto it is
  }
}

const sodium = loadSodium();

/** What verifies here by default: libsodium when it loaded. */
export const DEFAULT_ED25519_ENGINE: Ed25519Engine = sodium ? 'libsodium' : 'node:crypto';

const ED25519_SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');

export interface Ed25519Key {
  readonly engine: Ed25519Engine;
  /** Whether `signature` (64 bytes) signs `message` under this key. */
  verify(message: Buffer, signature: Buffer): boolean;
}

/** A verifier for a raw 32-byte public key, on the given engine (libsodium only where it loaded). */
export function ed25519Key(raw: Buffer, engine: Ed25519Engine = DEFAULT_ED25519_ENGINE): Ed25519Key {
  if (raw.length !== 32) throw new Error('an Ed25519 public key is 32 raw bytes');
  if (engine === 'libsodium') {
    if (!sodium) throw new Error('libsodium (sodium-native) does not load on this machine');
    const key = Buffer.from(raw);
    return {
      engine,
      verify: (message, signature) =>
        signature.length === 64 && sodium.crypto_sign_verify_detached(signature, message, key),
    };
  }
  const key = createPublicKey({ key: Buffer.concat([ED25519_SPKI_PREFIX, raw]), format: 'der', type: 'spki' });
  return { engine, verify: (message, signature) => signature.length === 64 && verify(null, message, key, signature) };
}
