// The API's door: a presented key → the account it opens, for one API process.
// Looks the key up (accounts.ts) and records its use as last_used_at at most once
// a minute per key and process, off the request's path (a guarded UPDATE, so other
// processes' touches in the same minute change nothing either): never a write per
// request.

import type pg from 'pg';
import type { Logger } from '../telemetry/log.js';
import { lookupKey, type Principal } from './accounts.js';
import { apiKeyTouch } from './accounts.sql.js';

/** last_used_at is kept to this precision: one write per key per this long, at most, per process. */
export const TOUCH_EVERY_MS = 60_000;

export interface AuthenticatorDeps {
  pool: pg.Pool;
  log: Logger;
}

export class Authenticator {
  /** Key id → when this process last recorded its use. Bounded: forgotten once a minute old. */
  private readonly touched = new Map<string, number>();

  constructor(private readonly deps: AuthenticatorDeps) {}

  /** The account a presented key opens at `now`, or null (malformed, unknown, revoked, expired). */
  async authenticate(presented: string, now = new Date()): Promise<Principal | null> {
    const grant = await lookupKey(this.deps.pool, presented, now);
    if (!grant) return null;
    this.touch(grant.apiKeyId, now);
    return { accountId: grant.accountId, apiKeyId: grant.apiKeyId };
  }

  private touch(keyId: string, now: Date): void {
    const at = now.getTime();
    const last = this.touched.get(keyId);
    if (last !== undefined && at - last < TOUCH_EVERY_MS) return;
    if (this.touched.size > 10_000) {
      for (const [id, t] of this.touched) if (at - t >= TOUCH_EVERY_MS) this.touched.delete(id);
    }
    this.touched.set(keyId, at);
    // Bookkeeping, not the request's business: a failure is logged and the request goes on.
    apiKeyTouch(this.deps.pool, keyId, now).catch((err: Error) =>
      this.deps.log.debug({ err: err.message, keyId }, 'could not record an API key’s use'),
    );
  }
}
