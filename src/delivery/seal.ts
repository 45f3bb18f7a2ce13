// Seals the webhook secrets an earlier release stored in clear (moved aside,
// marked, by a migration), at a worker's start, in small batches that skip rows
// another process is sealing at the same moment.

import type pg from 'pg';
import { withTx } from '../db/tx.js';
import type { Logger } from '../telemetry/log.js';
import { type Keyring, LEGACY_CLEAR } from './keyring.js';
import { secretReseal, secretsUnsealed } from './secrets.sql.js';

export async function sealLegacySecrets(pool: pg.Pool, keys: Keyring, log: Logger): Promise<number> {
  let sealed = 0;
  for (;;) {
    const n = await withTx(pool, async (tx) => {
      const rows = await secretsUnsealed(tx, 100);
      for (const r of rows) await secretReseal(tx, r.id, keys.seal(r.endpoint_id, r.sealed.slice(LEGACY_CLEAR.length)));
      return rows.length;
    });
    sealed += n;
    if (n === 0) break;
  }
  if (sealed > 0) log.info({ sealed }, 'sealed webhook secrets stored in clear');
  return sealed;
}
