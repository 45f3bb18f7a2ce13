// The verify micro-benchmark: CPU µs per Ed25519 check of one signed webhook,
// libsodium against node:crypto, in this process and the same run as the load
// figures. Rounds alternate between the two, so a neighbour's burst of load
// lands on both rather than on one.

import { nodeEd25519, sodiumEd25519, type Ed25519 } from '../../carrier/telnyx/ed25519.js';
import type { SignedWebhook } from './webhooks.js';

export interface VerifyMicro {
  /** The signed bytes: "<timestamp>|<body>". */
  bytes: number;
  iterations: number;
  /** CPU µs per verification, the lowest round's (the least disturbed); null when sodium-native did not load. */
  libsodium: number | null;
  nodeCrypto: number;
}

export function measureVerify(w: SignedWebhook, publicKeyBase64: string, iterations: number): VerifyMicro {
  const message = Buffer.concat([Buffer.from(`${w.headers['telnyx-timestamp']}|`, 'latin1'), w.body]);
  const signature = Buffer.from(w.headers['telnyx-signature-ed25519']!, 'base64');
  const key = Buffer.from(publicKeyBase64, 'base64');
  const impls: Ed25519[] = [nodeEd25519, ...(sodiumEd25519 ? [sodiumEd25519] : [])];
  const best = new Map<Ed25519, number>(impls.map((i) => [i, Number.POSITIVE_INFINITY]));
  const rounds = 5;
  const perRound = Math.max(1, Math.ceil(iterations / rounds));
  for (const impl of impls) round(impl.verifier(key), message, signature, Math.min(200, perRound)); // warm-up
  for (let r = 0; r < rounds; r++) {
    for (const impl of impls) {
      const us = round(impl.verifier(key), message, signature, perRound);
      best.set(impl, Math.min(best.get(impl)!, us));
    }
  }
  return {
    bytes: message.length,
    iterations: perRound * rounds,
    libsodium: sodiumEd25519 ? best.get(sodiumEd25519)! : null,
    nodeCrypto: best.get(nodeEd25519)!,
  };
}

function round(check: (m: Buffer, s: Buffer) => boolean, message: Buffer, signature: Buffer, n: number): number {
  const before = process.cpuUsage();
  for (let i = 0; i < n; i++) {
    if (!check(message, signature)) throw new Error('the benchmark signature did not verify');
  }
  const used = process.cpuUsage(before);
  return (used.user + used.system) / n;
}
