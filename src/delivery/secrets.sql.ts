// SQL for webhook_endpoint_secrets: an endpoint's signing secrets, sealed
// (keyring.ts). The current one has no end; a rotation gives the current one an
// end 24 h away and adds a new current one, so every secret younger than that
// keeps signing, however many rotations happen meanwhile.

import type { Db } from '../db/pool.js';
import type { Tx } from '../db/tx.js';
import { LEGACY_CLEAR } from './keyring.js';

export async function secretAdd(tx: Tx, endpointId: string, sealed: string): Promise<void> {
  await tx.query({
    name: 'secret_add',
    text: 'INSERT INTO webhook_endpoint_secrets (endpoint_id, sealed) VALUES ($1, $2)',
    values: [endpointId, sealed],
  });
}

/** The current secret signs until `until`, beside the one added after it. */
export async function secretRetireCurrent(tx: Tx, endpointId: string, until: Date): Promise<void> {
  await tx.query({
    name: 'secret_retire_current',
    text: 'UPDATE webhook_endpoint_secrets SET expires_at = $2 WHERE endpoint_id = $1 AND expires_at IS NULL',
    values: [endpointId, until],
  });
}

/** The sealed secrets that sign at `at`, newest first. */
export async function secretsSigning(db: Db, endpointId: string, at: Date): Promise<string[]> {
  const { rows } = await db.query<{ sealed: string }>({
    name: 'secrets_signing',
    text: `SELECT sealed FROM webhook_endpoint_secrets
            WHERE endpoint_id = $1 AND (expires_at IS NULL OR expires_at > $2)
            ORDER BY created_at DESC, id DESC`,
    values: [endpointId, at],
  });
  return rows.map((r) => r.sealed);
}

/** A deleted endpoint keeps no secret. */
export async function secretsWipe(tx: Tx, endpointId: string): Promise<void> {
  await tx.query({
    name: 'secrets_wipe',
    text: 'DELETE FROM webhook_endpoint_secrets WHERE endpoint_id = $1',
    values: [endpointId],
  });
}

/** Secrets still stored in clear (from before sealing), locked for sealing; ended ones are deleted instead. */
export async function secretsUnsealed(
  tx: Tx,
  limit: number,
): Promise<{ id: string; endpoint_id: string; sealed: string }[]> {
  await tx.query({
    name: 'secrets_unsealed_expired',
    text: `DELETE FROM webhook_endpoint_secrets WHERE starts_with(sealed, $1) AND expires_at <= now()`,
    values: [LEGACY_CLEAR],
  });
  const { rows } = await tx.query<{ id: string; endpoint_id: string; sealed: string }>({
    name: 'secrets_unsealed',
    text: `SELECT id, endpoint_id, sealed FROM webhook_endpoint_secrets WHERE starts_with(sealed, $1)
            ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED`,
    values: [LEGACY_CLEAR, limit],
  });
  return rows;
}

export async function secretReseal(tx: Tx, id: string, sealed: string): Promise<void> {
  await tx.query({
    name: 'secret_reseal',
    text: 'UPDATE webhook_endpoint_secrets SET sealed = $2 WHERE id = $1',
    values: [id, sealed],
  });
}
