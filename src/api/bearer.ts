// The credential of an `Authorization: Bearer …` header, read the same way by the
// API's keys and the metrics token: the scheme case-insensitively (RFC 9110), the
// credential exactly as sent.

/** The credential after "Bearer " in any case, or null when the header is absent or another scheme. */
export function bearerCredential(authorization: string | undefined): string | null {
  if (typeof authorization !== 'string' || !/^bearer /i.test(authorization)) return null;
  return authorization.slice('bearer '.length).trim() || null;
}
