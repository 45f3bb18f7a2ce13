// Seeded randomness for the simulator's decisions: whether a knob fires, how long
// a webhook is held back, 500 or 503. One stream per simulator, so the same seed
// and the same requests replay the same misbehaviour. Identifiers are NOT drawn
// from it: a real carrier never reuses an id, and a dev database outlives the
// simulator process (a restarted simulator with the same seed must not hand out
// message ids it already handed out).

import { randomBytes } from 'node:crypto';

export type Random = () => number;

/** sfc32 seeded through splitmix32 from a string or number; uniform in [0, 1). */
export function seededRandom(seed: string | number): Random {
  let h = hashSeed(String(seed));
  const split = () => {
    h = (h + 0x9e3779b9) | 0;
    let z = h;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
    return (z ^ (z >>> 16)) >>> 0;
  };
  let a = split();
  let b = split();
  let c = split();
  let d = split();
  return () => {
    a >>>= 0;
    b >>>= 0;
    c >>>= 0;
    d >>>= 0;
    const t = (((a + b) | 0) + d) | 0;
    d = (d + 1) | 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) | 0;
    c = (c << 21) | (c >>> 11);
    c = (c + t) | 0;
    return (t >>> 0) / 4294967296;
  };
}

/** A fresh seed for runs that did not ask for one; printed so the run can be replayed. */
export function freshSeed(): string {
  return randomBytes(6).toString('hex');
}

function hashSeed(text: string): number {
  // FNV-1a: any string, including "42", is a valid seed.
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}
