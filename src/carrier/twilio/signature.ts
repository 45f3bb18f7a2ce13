// Twilio's webhook signature: X-Twilio-Signature is the base64 HMAC-SHA1, keyed
// by the account's auth token, of the full URL Twilio requested followed by every
// POST parameter, sorted by name, as name+value (a repeated name's values
// de-duplicated and sorted). There is no timestamp: the URL and the parameters are
// all it covers, so the URL must be the public one Twilio called (behind a proxy,
// HANDSET_PUBLIC_INGEST_URL), and a replay stays authentic (the deterministic
// event ids make it store nothing). The simulator signs with twilioSignature too;
// the tests hold both to the official `twilio` package's validator.

import { createHmac, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { VerifyFailure } from '../carrier.js';

export const SIGNATURE_HEADER = 'x-twilio-signature';

/** Form parameters in the order they came, a name possibly repeated. */
export type FormParams = readonly (readonly [string, string])[];

/** An application/x-www-form-urlencoded body's parameters (Twilio's webhooks and REST requests). */
export function parseForm(raw: Buffer | string): FormParams {
  return [...new URLSearchParams(typeof raw === 'string' ? raw : raw.toString('utf8'))];
}

/** The expected X-Twilio-Signature of a POST to `url` with `params`. */
export function twilioSignature(authToken: string, url: string, params: FormParams): string {
  const byName = new Map<string, string[]>();
  for (const [name, value] of params) byName.set(name, [...(byName.get(name) ?? []), value]);
  let data = url;
  for (const name of [...byName.keys()].sort()) {
    for (const value of [...new Set(byName.get(name))].sort()) data += name + value;
  }
  return createHmac('sha1', authToken).update(data, 'utf8').digest('base64');
}

/**
 * The forms of one URL that Twilio may have signed: as given, and with the
 * scheme's default port added or taken away (Twilio's own validator accepts both,
 * its signing being inconsistent about it). Never another scheme, host or path.
 */
export function signedForms(url: string): string[] {
  const m = /^(https?:\/\/)([^/?#]*)(.*)$/s.exec(url);
  if (!m) return [url];
  const [, scheme = '', authority = '', rest = ''] = m;
  const userinfo = authority.slice(0, authority.lastIndexOf('@') + 1);
  const hp = /^(\[[^\]]*\]|[^:]*)(?::(\d*))?$/.exec(authority.slice(userinfo.length));
  if (!hp) return [url];
  const [, host = '', port] = hp;
  const standard = scheme === 'https://' ? '443' : '80';
  if (port === undefined || port === '') return [url, `${scheme}${userinfo}${host}:${standard}${rest}`];
  if (port === standard) return [url, `${scheme}${userinfo}${host}${rest}`];
  return [url];
}

/** Null when the signature over `url` and the body's parameters is the auth token's. */
export function verifyTwilioSignature(
  authToken: string,
  url: string,
  raw: Buffer,
  headers: IncomingHttpHeaders,
): VerifyFailure | null {
  const header = headers[SIGNATURE_HEADER];
  if (typeof header !== 'string' || header === '') return 'missing_signature';
  if (!/^[A-Za-z0-9+/]{27}=$/.test(header)) return 'malformed_signature';
  const given = Buffer.from(header, 'base64');
  const params = parseForm(raw);
  for (const form of signedForms(url)) {
    const want = Buffer.from(twilioSignature(authToken, form, params), 'base64');
    if (want.length === given.length && timingSafeEqual(want, given)) return null;
  }
  return 'bad_signature';
}
