// The verify micro-benchmark: CPU per Ed25519 check of one signed receipt, on
// each engine ingest can use, in this process, in the same run as the rest (the
// engines alternate in rounds so that a busy moment of the machine hits both).

import { generateKeyPairSync, sign } from 'node:crypto';
import { ED25519_ENGINES, ed25519Key, type Ed25519Engine } from '../../carrier/telnyx/ed25519.js';

export interface VerifyBench {
  bodyBytes: number;
  /** CPU microseconds per verification, by engine; null where the engine does not load here. */
  micros: Record<Ed25519Engine, number | null>;
}

export function measureVerify(body: Buffer, rounds = 5, perRound = 4_000): VerifyBench {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519');
  const raw = publicKey.export({ type: 'spki', format: 'der' }).subarray(12);
  const message = Buffer.concat([Buffer.from(`${Math.floor(Date.now() / 1000)}|`), body]);
  const signature = sign(null, message, privateKey);
  const keys = ED25519_ENGINES.flatMap((engine) => {
    try {
      return [ed25519Key(raw, engine)];
    } catch {
      return [];
    }
  });
  const spent = new Map<Ed25519Engine, number>();
  for (let round = 0; round < rounds; round++) {
    for (const key of keys) {
      const before = process.cpuUsage();
      for (let i = 0; i < perRound; i++) {
        if (!key.verify(message, signature)) throw new Error(`${key.engine} refused a good signature`);
      }
      const { user, system } = process.cpuUsage(before);
      spent.set(key.engine, (spent.get(key.engine) ?? 0) + user + system);
    }
  }
  const micros = Object.fromEntries(
    ED25519_ENGINES.map((e) => [e, spent.has(e) ? spent.get(e)! / (rounds * perRound) : null]),
  ) as Record<Ed25519Engine, number | null>;
  return { bodyBytes: body.length, micros };
}
