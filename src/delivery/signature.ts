// Standard Webhooks 1.0 signing: HMAC-SHA256 over "{webhook-id}.{webhook-timestamp}.{body}"
// with the endpoint secret ("whsec_" + base64 of 32 random bytes), sent as
// "v1,<base64>". During a rotation both secrets sign and the header carries
// both signatures, space-separated, so a receiver holding either verifies.

import { createHmac, randomBytes } from 'node:crypto';

const SECRET_PREFIX = 'whsec_';

export function newEndpointSecret(): string {
  return SECRET_PREFIX + randomBytes(32).toString('base64');
}

export function signPayload(secret: string, msgId: string, timestampSeconds: number, body: string): string {
  const key = Buffer.from(secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret, 'base64');
  return `v1,${createHmac('sha256', key).update(`${msgId}.${timestampSeconds}.${body}`).digest('base64')}`;
}

export function webhookHeaders(secrets: string[], msgId: string, timestampSeconds: number, body: string) {
  return {
    'webhook-id': msgId,
    'webhook-timestamp': String(timestampSeconds),
    'webhook-signature': secrets.map((s) => signPayload(s, msgId, timestampSeconds, body)).join(' '),
  };
}
