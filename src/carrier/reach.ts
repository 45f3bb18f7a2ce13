// Whether a request that got no answer certainly never reached the carrier. A
// carrier that took a send but whose answer we lost may have sent the message;
// one we never reached has not. Only the first may be asked again before
// anything else is tried; only the second lets a message fail over at once. What
// counts as never reached: the connection was refused or never made (no route,
// no such host, no connection within the connect timeout), or TLS failed before
// a byte of the request was written. A reset, a timeout after connecting, or a
// socket closed under a request may each have come after the carrier read it.

/** Error codes (Node's, undici's, OpenSSL's) of a request that never left this machine for the carrier. */
const NEVER_REACHED = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EADDRNOTAVAIL',
  'UND_ERR_CONNECT_TIMEOUT',
  'ERR_TLS_CERT_ALTNAME_INVALID',
  'CERT_HAS_EXPIRED',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'ERR_SSL_WRONG_VERSION_NUMBER',
]);

/** The error codes in an error, its causes and (for several addresses tried) the errors it aggregates. */
function codesOf(err: unknown, depth = 0): string[] {
  if (!err || typeof err !== 'object' || depth > 4) return [];
  const e = err as { code?: unknown; cause?: unknown; errors?: unknown };
  const own = typeof e.code === 'string' ? [e.code] : [];
  const inner = Array.isArray(e.errors) ? e.errors.flatMap((x) => codesOf(x, depth + 1)) : [];
  return [...own, ...inner, ...codesOf(e.cause, depth + 1)];
}

/** True when the failed request certainly never reached the carrier (every code found says so). */
export function neverReached(err: unknown): boolean {
  const codes = codesOf(err);
  return codes.length > 0 && codes.every((c) => NEVER_REACHED.has(c));
}

/** The most telling code of a failed request, for logs and history ("ECONNREFUSED"). */
export function failureCode(err: unknown): string | null {
  return codesOf(err)[0] ?? null;
}
