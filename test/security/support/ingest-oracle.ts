// What the ingest endpoint must answer for a given request, by its contract,
// computed independently of src/: the signature rules (digits-only seconds,
// padded base64 of 64 bytes, tolerance both ways, Ed25519 over "<ts>|<body>")
// and the body rules (UTF-8 JSON with data.id and data.event_type as non-empty
// strings of at most 255 characters; jsonb refuses NUL and lone surrogates, which
// ingest stores as U+FFFD rather than lose an authentic webhook). Headers are seen the way Node's parser hands them over: latin1,
// surrounding spaces and tabs trimmed, duplicates joined with ", ".

import { verify, type KeyObject } from 'node:crypto';

export type SignatureVerdict = 'ok' | 'missing_signature' | 'malformed_signature' | 'stale_timestamp' | 'bad_signature';
export type BodyVerdict = 'stored' | 'malformed_body' | 'not_an_envelope' | 'unstorable_body' | 'stored_or_unstorable';

const trimOws = (s: string) => s.replace(/^[ \t]+|[ \t]+$/g, '');

/** The header value Node hands to the app for these raw values (undefined when absent). */
export function seenHeader(values: (string | Buffer)[]): string | undefined {
  if (values.length === 0) return undefined;
  return values
    .map((v) => trimOws((typeof v === 'string' ? Buffer.from(v, 'latin1') : v).toString('latin1')))
    .join(', ');
}

export function signatureVerdict(
  publicKey: KeyObject,
  ts: string | undefined,
  sig: string | undefined,
  body: Buffer,
  nowSeconds: number,
  toleranceSeconds: number,
): SignatureVerdict {
  if (ts === undefined || sig === undefined) return 'missing_signature';
  if (!/^[0-9]{1,15}$/.test(ts) || !/^[A-Za-z0-9+/]{86}==$/.test(sig)) return 'malformed_signature';
  if (Math.abs(nowSeconds - Number(ts)) > toleranceSeconds) return 'stale_timestamp';
  const signed = Buffer.concat([Buffer.from(`${ts}|`, 'latin1'), body]);
  return verify(null, signed, publicKey, Buffer.from(sig, 'base64')) ? 'ok' : 'bad_signature';
}

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** What a correctly signed request with this body must come to. */
export function bodyVerdict(body: Buffer): BodyVerdict {
  let text: string;
  let value: unknown;
  try {
    text = utf8.decode(body);
    value = JSON.parse(text);
  } catch {
    return 'malformed_body';
  }
  const data = isObject(value) ? value['data'] : undefined;
  if (!isObject(data)) return 'not_an_envelope';
  for (const key of ['id', 'event_type']) {
    const v = data[key];
    if (typeof v !== 'string' || v.length === 0 || v.length > 255) return 'not_an_envelope';
  }
  // jsonb holds neither NUL nor a lone surrogate; ingest stores both as U+FFFD, so no string makes a body unstorable.
  const shape = jsonShape(value);
  // Very deep nesting and out-of-range numbers depend on the server's limits.
  if (shape.depth > 1000 || shape.hugeNumber) return 'stored_or_unstorable';
  return 'stored';
}

/** Walks a parsed JSON value without recursion (it may be nested 500,000 deep). */
function jsonShape(root: unknown): { depth: number; hugeNumber: boolean } {
  let depth = 0;
  let hugeNumber = false;
  const stack: [unknown, number][] = [[root, 1]];
  while (stack.length > 0) {
    const [v, d] = stack.pop()!;
    depth = Math.max(depth, d);
    if (typeof v === 'number') hugeNumber ||= !Number.isFinite(v) || Math.abs(v) > 1e300;
    else if (Array.isArray(v)) for (const x of v) stack.push([x, d + 1]);
    else if (isObject(v)) {
      for (const x of Object.values(v)) stack.push([x, d + 1]);
    }
  }
  return { depth, hugeNumber };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
