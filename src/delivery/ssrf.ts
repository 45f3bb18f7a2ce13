// Keeps customer webhook URLs from reaching our own network: loopback, private,
// link-local (cloud metadata), CGNAT, multicast and reserved ranges are refused,
// including IPv4 hidden inside IPv6 (mapped, SIIT-translated, compatible, NAT64,
// 6to4), and so is port 0. Checked when an endpoint is saved, and again at
// connect time on the address actually dialed, so DNS rebinding cannot slip past.
// HANDSET_ALLOW_PRIVATE_WEBHOOK_URLS=true turns it off (dev and tests).

import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { BlockList, isIP, type LookupFunction } from 'node:net';
import type { ErrorCode } from '../api/codes.js';

// Two lists: Node's BlockList matches an IPv4 address against IPv6 rules too (as ::ffff:a.b.c.d).
const blockedV4 = new BlockList();
const blockedV6 = new BlockList();
for (const [net, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.88.99.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const) {
  blockedV4.addSubnet(net, prefix, 'ipv4');
}
// Addresses with an IPv4 inside (below) are judged by that IPv4 first; what is left of
// their ranges is not a unicast host on the internet.
for (const [net, prefix] of [
  ['::', 8], // unspecified, loopback, and the IPv4-compatible/mapped/translated forms
  ['100::', 64],
  ['64:ff9b::', 32], // the NAT64 well-known /96 and the local-use /48 (RFC 8215), whose IPv4 is not ours to judge
  ['2001::', 23], // IETF protocol assignments: Teredo (2001::/32, a client's IPv4 hidden inverted), benchmarking, ORCHID
  ['2001:db8::', 32],
  ['3fff::', 20], // documentation (RFC 9637)
  ['5f00::', 16], // SRv6 segment identifiers
  ['fc00::', 7],
  ['fe80::', 10],
  ['fec0::', 10],
  ['ff00::', 8],
] as const) {
  blockedV6.addSubnet(net, prefix, 'ipv6');
}

/** True for any address a customer webhook must not reach. */
export function isBlockedAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return blockedV4.check(address, 'ipv4');
  if (family !== 6) return true;
  const embedded = embeddedIPv4(address);
  if (embedded) return blockedV4.check(embedded, 'ipv4');
  return blockedV6.check(address, 'ipv6');
}

// ::ffff:a.b.c.d (mapped), ::ffff:0:a.b.c.d (SIIT-translated), ::a.b.c.d (compatible),
// 64:ff9b::a.b.c.d (NAT64 well-known prefix), 2002:AABB:CCDD::/48 (6to4).
function embeddedIPv4(address: string): string | null {
  const words = expandIPv6(address);
  if (!words) return null;
  const v4 = (hi: number, lo: number) => `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
  const zero = (from: number, to: number) => words.slice(from, to).every((w) => w === 0);
  if (zero(0, 5) && words[5] === 0xffff) return v4(words[6]!, words[7]!);
  if (zero(0, 4) && words[4] === 0xffff && words[5] === 0) return v4(words[6]!, words[7]!);
  if (zero(0, 6) && (words[6]! !== 0 || words[7]! > 1)) return v4(words[6]!, words[7]!);
  if (words[0] === 0x64 && words[1] === 0xff9b && zero(2, 6)) return v4(words[6]!, words[7]!);
  if (words[0] === 0x2002) return v4(words[1]!, words[2]!);
  return null;
}

function expandIPv6(address: string): number[] | null {
  let text = address.split('%')[0]!;
  const tail = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (tail) {
    const [a, b, c, d] = tail[1]!.split('.').map(Number) as [number, number, number, number];
    text = `${text.slice(0, -tail[1]!.length)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, rest] = text.split('::') as [string, string | undefined];
  const h = head ? head.split(':') : [];
  const r = rest !== undefined && rest !== '' ? rest.split(':') : [];
  const fill = rest !== undefined ? 8 - h.length - r.length : 0;
  const parts = [...h, ...Array(fill).fill('0'), ...r];
  if (parts.length !== 8) return null;
  return parts.map((p) => Number.parseInt(p, 16));
}

export type UrlCheck =
  | { ok: true; url: URL }
  | { ok: false; code: Extract<ErrorCode, 'invalid_url' | 'url_unresolvable' | 'url_not_allowed'>; detail: string };

/** Validates an endpoint URL when it is saved. */
export async function checkEndpointUrl(text: string, allowPrivate: boolean): Promise<UrlCheck> {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return { ok: false, code: 'invalid_url', detail: 'url is not a valid absolute URL' };
  }
  if (url.protocol !== 'https:' && !(url.protocol === 'http:' && allowPrivate)) {
    return { ok: false, code: 'invalid_url', detail: 'url must use https' };
  }
  if (url.username || url.password)
    return { ok: false, code: 'invalid_url', detail: 'url must not contain credentials' };
  if (isBlockedPort(url)) return { ok: false, code: 'invalid_url', detail: 'url must not use port 0' };
  if (allowPrivate) return { ok: true, url };
  const host = url.hostname.replace(/^\[|\]$/g, '');
  let addresses: string[];
  try {
    addresses = isIP(host) ? [host] : (await resolveAll(host)).map((a) => a.address);
  } catch {
    return { ok: false, code: 'url_unresolvable', detail: `the host ${host} does not resolve` };
  }
  if (addresses.length === 0 || addresses.some(isBlockedAddress)) {
    return { ok: false, code: 'url_not_allowed', detail: 'url resolves to a private, loopback or reserved address' };
  }
  return { ok: true, url };
}

function resolveAll(host: string): Promise<LookupAddress[]> {
  return new Promise((resolve, reject) =>
    dnsLookup(host, { all: true, verbatim: true }, (err, addresses) => (err ? reject(err) : resolve(addresses))),
  );
}

/** Port 0 names no service: connecting to it reaches whatever the system makes of it, never a receiver. */
export function isBlockedPort(url: URL): boolean {
  return url.port === '0';
}

export class BlockedAddressError extends Error {
  override name = 'BlockedAddressError';
  readonly code = 'EBLOCKEDADDRESS';
}

/**
 * A dns.lookup for http(s).request that refuses blocked addresses: the address
 * checked is the address connected to.
 */
export const guardedLookup: LookupFunction = (hostname, options, callback) => {
  dnsLookup(hostname, { ...options, all: true }, (err, addresses: LookupAddress[]) => {
    if (err) return (callback as (e: Error) => void)(err);
    const bad = addresses.find((a) => isBlockedAddress(a.address));
    if (bad || addresses.length === 0) {
      return (callback as (e: Error) => void)(new BlockedAddressError(`${hostname} resolves to a blocked address`));
    }
    if ((options as { all?: boolean }).all) return (callback as (e: null, a: LookupAddress[]) => void)(null, addresses);
    const first = addresses[0]!;
    (callback as (e: null, a: string, f: number) => void)(null, first.address, first.family);
  });
};
