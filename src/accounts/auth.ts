// The API's door: a presented key → the account it opens, for one API process.
//
// A key found in the database is remembered for KEY_CACHE_TTL_MS (in a bounded
// map keyed by the key's SHA-256), so a busy key — and a key past its rate limit —
// costs no database round trip. What makes remembering safe is LISTEN: every change
// that ends a key or moves its end NOTIFYs API_KEY_CHANNEL in the transaction that
// made it (accounts.sql.ts), and each process forgets that key when the change
// commits; the process that made the change forgets it before it answers (changed()),
// since its own notice may arrive after its next request. The cache is trusted only while the listening connection is known to be
// up:
//
//   down ──connect + LISTEN ok──▶ listening (cache empty, then filled by lookups)
//    ▲                               │
//    └── error / end / a heartbeat ──┘   (cache dropped; every request asks the
//        unanswered (db/listen.ts)             database until LISTEN is back)
//
// A lookup that started before a notification arrived is not cached (the
// generation count): it may have read the key just before its revoke committed.
// An expired key is refused from the cache by its own expires_at, no notice needed.
//
// Use is recorded as last_used_at at most once a minute per key and process, off
// the request's path (a guarded UPDATE, so other processes' touches in the same
// minute change nothing either): never a write per request.

import type pg from 'pg';
import { Listener } from '../db/listen.js';
import type { Logger } from '../telemetry/log.js';
import type { Metrics } from '../telemetry/metrics.js';
import { isKeyShaped, type KeyGrant, lookupKey, type Principal, sha256 } from './accounts.js';
import { API_KEY_CHANNEL, apiKeyTouch } from './accounts.sql.js';

/** last_used_at is kept to this precision: one write per key per this long, at most, per process. */
export const TOUCH_EVERY_MS = 60_000;
/** How long a key found in the database is answered from memory; also the bound on staleness if a notice is lost. */
export const KEY_CACHE_TTL_MS = 30_000;
/** Keys remembered at once per process; beyond it the oldest is forgotten. */
export const KEY_CACHE_MAX = 10_000;

export interface AuthenticatorDeps {
  pool: pg.Pool;
  log: Logger;
  metrics?: Metrics;
  ttlMs?: number;
  maxEntries?: number;
  /** Where the LISTEN connection goes; the pool's database by default (a test puts a cuttable proxy between). */
  listenTo?: string;
}

interface Cached {
  grant: KeyGrant;
  /** Epoch ms after which the database is asked again. */
  until: number;
}

export class Authenticator {
  /** Key digest (base64) → what the database said about it. */
  private readonly cache = new Map<string, Cached>();
  /** Key id → its digest, so a notice (which names the id) finds the entry. */
  private readonly digestOf = new Map<string, string>();
  /** Key id → when this process last recorded its use. */
  private readonly touched = new Map<string, number>();
  /** Grows with every notice and every loss of the listener: a lookup begun under an older one is not cached. */
  private generation = 0;
  private readonly listener: Listener;
  private stopped = false;
  private readonly ttlMs: number;
  private readonly maxEntries: number;

  constructor(private readonly deps: AuthenticatorDeps) {
    this.ttlMs = deps.ttlMs ?? KEY_CACHE_TTL_MS;
    this.maxEntries = deps.maxEntries ?? KEY_CACHE_MAX;
    this.listener = new Listener({
      pool: deps.pool,
      channel: API_KEY_CHANNEL,
      applicationName: 'handset-api-keys-listen',
      ...(deps.listenTo ? { connectionString: deps.listenTo } : {}),
      onNotification: (keyId) => this.changed(keyId),
      onUp: (afterLoss) => {
        // Anything cached before was cached while no notice could arrive.
        this.dropAll();
        if (afterLoss) deps.log.info('API key listener back: recently seen keys are cached again');
        deps.metrics?.apiKeyListener.set(1);
      },
      onDown: (why, wasUp, retryInMs) => {
        this.dropAll();
        deps.metrics?.apiKeyListener.set(0);
        // One warning per outage; each failed reconnect after it is only debug.
        deps.log[wasUp ? 'warn' : 'debug'](
          { err: why, retryInMs },
          'API key listener lost: keys are checked in the database until it is back',
        );
      },
    });
  }

  /** Whether the cache is being trusted (the listener is up). */
  get trusted(): boolean {
    return this.listener.up;
  }

  /** Keys remembered now. */
  get size(): number {
    return this.cache.size;
  }

  /** Starts listening; resolves after the first attempt, whether or not it connected (it keeps trying). */
  async start(): Promise<void> {
    await this.listener.start();
    if (!this.listener.up && !this.stopped) {
      this.deps.log.warn('API key listener not connected yet: keys are checked in the database until it is');
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.listener.stop();
    this.dropAll();
    this.deps.metrics?.apiKeyListener.set(0);
  }

  /**
   * A key was revoked or its end moved: forget it now. The notice does the same in
   * every process, but it arrives a moment after the commit; the process that made
   * the change calls this before it answers, so its own next request is refused.
   */
  changed(keyId: string): void {
    this.generation++;
    if (keyId) this.forget(keyId);
  }

  /** The account a presented key opens at `now`, or null (malformed, unknown, revoked, expired). */
  async authenticate(presented: string, now = new Date()): Promise<Principal | null> {
    if (!isKeyShaped(presented)) return null;
    const digest = sha256(presented).toString('base64');
    const at = now.getTime();
    if (this.listener.up) {
      const hit = this.cache.get(digest);
      if (hit && hit.until > at) {
        this.deps.metrics?.apiKeyAuth.inc({ via: 'cache' });
        if (hit.grant.expiresAt && hit.grant.expiresAt.getTime() <= at) {
          this.forget(hit.grant.apiKeyId);
          return null;
        }
        return this.opened(hit.grant, now);
      }
    }
    const generation = this.generation;
    const grant = await lookupKey(this.deps.pool, presented, now);
    this.deps.metrics?.apiKeyAuth.inc({ via: 'database' });
    if (!grant) return null;
    if (this.listener.up && generation === this.generation) this.remember(digest, grant, at);
    return this.opened(grant, now);
  }

  private opened(grant: KeyGrant, now: Date): Principal {
    this.touch(grant.apiKeyId, now);
    return { accountId: grant.accountId, apiKeyId: grant.apiKeyId };
  }

  private remember(digest: string, grant: KeyGrant, at: number): void {
    this.forget(grant.apiKeyId);
    while (this.cache.size >= this.maxEntries) {
      const [oldest, entry] = this.cache.entries().next().value as [string, Cached];
      this.cache.delete(oldest);
      this.digestOf.delete(entry.grant.apiKeyId);
    }
    this.cache.set(digest, { grant, until: at + this.ttlMs });
    this.digestOf.set(grant.apiKeyId, digest);
  }

  private forget(keyId: string): void {
    const digest = this.digestOf.get(keyId);
    if (digest === undefined) return;
    this.digestOf.delete(keyId);
    this.cache.delete(digest);
  }

  private dropAll(): void {
    this.generation++;
    this.cache.clear();
    this.digestOf.clear();
  }

  private touch(keyId: string, now: Date): void {
    const at = now.getTime();
    const last = this.touched.get(keyId);
    if (last !== undefined && at - last < TOUCH_EVERY_MS) return;
    if (this.touched.size > this.maxEntries) {
      for (const [id, t] of this.touched) if (at - t >= TOUCH_EVERY_MS) this.touched.delete(id);
    }
    this.touched.set(keyId, at);
    // Bookkeeping, not the request's business: a failure is logged and the request goes on.
    apiKeyTouch(this.deps.pool, keyId, now).catch((err: Error) =>
      this.deps.log.debug({ err: err.message, keyId }, 'could not record an API key’s use'),
    );
  }
}
