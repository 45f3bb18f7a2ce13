// Ed25519 verification of detached signatures: libsodium (sodium-native) when it
// loads, node:crypto otherwise, chosen once when this module loads.
//
// Why two: every webhook is verified, and on Node 20 `crypto.verify` pays OpenSSL
// 3's per-call overhead (a key context and a digest context each time), several
// times what libsodium needs for the same check; on a busy ingest it is most of
// the CPU spent per webhook. sodium-native ships prebuilt binaries, so it loads
// without a compiler; where it does not (another platform, a stripped install)
// node:crypto gives the same answers, only slower (a test holds both, and the
// official SDK's verifier, to the same fixtures).

import { createPublicKey, verify } from 'node:crypto';
import { createRequire } from 'node:module';

export type Ed25519Name = 'libsodium' | 'node:crypto';

export interface Ed25519 {
  readonly name: Ed25519Name;
  /** A check of 64-byte signatures under one raw 32-byte public key. */
  verifier(publicKey: Buffer): (message: Buffer, signature: Buffer) => boolean;
}

const PUBLIC_KEY_BYTES = 32;
const SIGNATURE_BYTES = 64;
const SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');

function rawKey(publicKey: Buffer): Buffer {
  if (publicKey.length !== PUBLIC_KEY_BYTES) throw new Error('an Ed25519 public key is 32 raw bytes');
  return Buffer.from(publicKey);
}

export const nodeEd25519: Ed25519 = {
  name: 'node:crypto',
  verifier(publicKey) {
    const key = createPublicKey({ key: Buffer.concat([SPKI_PREFIX, rawKey(publicKey)]), format: 'der', type: 'spki' });
    return (message, signature) => signature.length === SIGNATURE_BYTES && verify(null, message, key, signature);
  },
};

interface Sodium {
  crypto_sign_verify_detached(signature: Buffer, message: Buffer, publicKey: Buffer): boolean;
}

function loadSodium(): Ed25519 | null {
  let sodium: Sodium;
  try {
    sodium = createRequire(import.meta.url)('sodium-native') as Sodium;
  } catch {
    return null;
  }
  return {
    name: 'libsodium',
    verifier(publicKey) {
      const key = rawKey(publicKey);
      // sodium-native reads the first 64 bytes of a longer signature; a longer one is not a signature.
      return (message, signature) =>
        signature.length === SIGNATURE_BYTES && sodium.crypto_sign_verify_detached(signature, message, key);
    },
  };
}

/** libsodium's verifier, or null when sodium-native does not load here. */
export const sodiumEd25519: Ed25519 | null = loadSodium();

/** The verifier this process uses. */
export const ed25519: Ed25519 = sodiumEd25519 ?? nodeEd25519;
