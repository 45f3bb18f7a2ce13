// Webhook signing secrets at rest: AES-256-GCM with the deployment's key
// (HANDSET_SECRET_KEY). The first key encrypts; every key decrypts, found by the
// short id written beside the ciphertext, so keys rotate by prepending a new one
// and dropping the old once nothing is encrypted with it. The endpoint id is the
// additional authenticated data: a ciphertext copied onto another endpoint does
// not decrypt.

import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';

const VERSION = 'v1';
export const LEGACY_CLEAR = 'clear:';

export interface Keyring {
  seal(endpointId: string, secret: string): string;
  open(endpointId: string, sealed: string): string;
}

/** A fresh key, as HANDSET_SECRET_KEY takes it (base64 of 32 random bytes). */
export const newSecretKey = () => randomBytes(32).toString('base64');

const keyId = (key: Buffer) => createHash('sha256').update(key).digest('hex').slice(0, 8);

export function keyring(keys: readonly Buffer[]): Keyring {
  const first = keys[0];
  if (!first) throw new Error('a keyring needs at least one key');
  const byId = new Map(keys.map((k) => [keyId(k), k]));
  return {
    seal(endpointId, secret) {
      const iv = randomBytes(12);
      const cipher = createCipheriv('aes-256-gcm', first, iv);
      cipher.setAAD(Buffer.from(endpointId, 'utf8'));
      const ct = Buffer.concat([cipher.update(secret, 'utf8'), cipher.final(), cipher.getAuthTag()]);
      return [VERSION, keyId(first), iv.toString('base64'), ct.toString('base64')].join(':');
    },
    open(endpointId, sealed) {
      // Stored before secrets were sealed, and not sealed yet (sealLegacySecrets does it at start).
      if (sealed.startsWith(LEGACY_CLEAR)) return sealed.slice(LEGACY_CLEAR.length);
      const [version, id, iv, ct] = sealed.split(':');
      if (version !== VERSION || !id || !iv || !ct) throw new Error('not a sealed webhook secret');
      const key = byId.get(id);
      if (!key) throw new Error(`webhook secret sealed with key ${id}, which HANDSET_SECRET_KEY no longer has`);
      const bytes = Buffer.from(ct, 'base64');
      const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(iv, 'base64'));
      decipher.setAAD(Buffer.from(endpointId, 'utf8'));
      decipher.setAuthTag(bytes.subarray(bytes.length - 16));
      return Buffer.concat([decipher.update(bytes.subarray(0, bytes.length - 16)), decipher.final()]).toString('utf8');
    },
  };
}
