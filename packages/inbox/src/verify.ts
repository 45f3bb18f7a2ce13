// Standard Webhooks verification, before anything is parsed or stored: the
// webhook-id, a webhook-timestamp within the tolerance either way, and a v1
// signature that matches under any of the endpoint's secrets (during a rotation
// the sender signs with both and sends both, space-separated). `standardwebhooks`
// computes each signature; its own verify() is not used because its tolerance is
// fixed at five minutes, it reads the clock itself and it cannot read a Fetch
// Headers object.

import { timingSafeEqual } from 'node:crypto';
import { Webhook } from 'standardwebhooks';

/** The request's headers: Node's IncomingHttpHeaders, a plain object (any case) or a Fetch Headers. */
export type HeaderBag = Headers | Record<string, string | string[] | undefined>;

/** The raw body as received: the signature covers these exact bytes. */
export type RawBody = string | Uint8Array | ArrayBuffer;

export type Verdict = { ok: true; id: string } | { ok: false; reason: string };

export class Verifier {
  private readonly signers: Webhook[];

  constructor(
    secrets: readonly string[],
    private readonly toleranceSeconds: number,
  ) {
    if (secrets.length === 0) throw new TypeError('secret: give the endpoint’s signing secret (whsec_…)');
    this.signers = secrets.map((secret, i) => {
      try {
        if (typeof secret !== 'string' || secret.trim() === '') throw new Error('empty');
        return new Webhook(secret);
      } catch {
        throw new TypeError(`secret${secrets.length > 1 ? `[${i}]` : ''}: expected a signing secret (whsec_…)`);
      }
    });
  }

  verify(headers: HeaderBag, body: string, nowSeconds: number): Verdict {
    const id = header(headers, 'webhook-id');
    const timestamp = header(headers, 'webhook-timestamp');
    const signatures = header(headers, 'webhook-signature');
    if (!id || !timestamp || !signatures) return { ok: false, reason: 'missing webhook-id, -timestamp or -signature' };
    if (!/^\d{1,12}$/.test(timestamp)) return { ok: false, reason: 'webhook-timestamp is not Unix seconds' };
    const seconds = Number(timestamp);
    if (Math.abs(nowSeconds - seconds) > this.toleranceSeconds) {
      return { ok: false, reason: `webhook-timestamp ${seconds < nowSeconds ? 'too old' : 'too new'}` };
    }
    const given = signatures
      .split(' ')
      .filter((s) => s.startsWith('v1,'))
      .map((s) => encoder.encode(s));
    const at = new Date(seconds * 1000);
    for (const signer of this.signers) {
      const expected = encoder.encode(signer.sign(id, at, body));
      if (given.some((g) => g.length === expected.length && timingSafeEqual(g, expected))) return { ok: true, id };
    }
    return { ok: false, reason: 'no matching signature' };
  }
}

/** A header's value, looked up case-insensitively. */
export function header(headers: HeaderBag, name: string): string | undefined {
  if (typeof (headers as Headers).get === 'function' && typeof (headers as Headers).has === 'function') {
    return (headers as Headers).get(name) ?? undefined;
  }
  const bag = headers as Record<string, string | string[] | undefined>;
  let v = bag[name];
  if (v === undefined) {
    const key = Object.keys(bag).find((k) => k.toLowerCase() === name);
    v = key === undefined ? undefined : bag[key];
  }
  return Array.isArray(v) ? v.join(' ') : v;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** The body as text, decoded the way the signature was computed over it. */
export function bodyText(body: RawBody): string {
  if (typeof body === 'string') return body;
  if (body instanceof Uint8Array) return decoder.decode(body);
  if (body instanceof ArrayBuffer) return decoder.decode(new Uint8Array(body));
  throw new TypeError(
    `body: expected the raw body as received (a string, Buffer, Uint8Array or ArrayBuffer), got ${describe(body)}; ` +
      'a JSON body parser that ran first has thrown the exact bytes away',
  );
}

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (typeof v === 'object') return `an object (${(v as object).constructor?.name ?? 'Object'})`;
  return typeof v;
}
