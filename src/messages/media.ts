// Which media URLs an MMS may carry. The carrier fetches them, so each must be a
// URL it can reach on the public internet: https, a host that is a public name
// or address (not loopback, private, link-local or metadata ranges, the same
// ranges webhook endpoints are judged by), and written as one clean URL — no
// whitespace or control characters, which URL parsers silently drop.

import { isIP } from 'node:net';
import { isBlockedAddress } from '../delivery/ssrf.js';

export const MAX_MEDIA_URL_LENGTH = 2048;

/** Null for a URL the carrier may be given; otherwise what is wrong with it, for a person. */
export function mediaUrlProblem(text: string): string | null {
  if (text.length > MAX_MEDIA_URL_LENGTH) return `is longer than ${MAX_MEDIA_URL_LENGTH} characters`;
  if (/[\s\u0000-\u001f\u007f]/.test(text)) return 'holds whitespace or a control character';
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return 'is not a URL';
  }
  if (url.protocol !== 'https:') return 'must be an https URL';
  if (url.username || url.password) return 'must not carry a user name or password';
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1');
  if (isIP(host)) return isBlockedAddress(host) ? `${host} is not a public address` : null;
  if (!host.includes('.') || host === 'localhost' || host.endsWith('.localhost') || host.endsWith('.')) {
    return `${host} is not a public host name`;
  }
  return null;
}
