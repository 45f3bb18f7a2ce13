// The API's door: a presented key → the account it opens, for one API process.
//
// A key found in the database is remembered for KEY_CACHE_TTL_MS (in a bounded
// map keyed by the key's SHA-256), so a busy key — and a key past its rate limit —
// costs no database round trip. What makes remembering safe is LISTEN: every change
// that ends a key or moves its end NOTIFYs API_KEY_CHANNEL in the transaction that
// made it (accounts.sql.ts), and each process forgets that key when the change
// commits. The cache is trusted only while the listening connection is known to be
// up:
//
//   down ──connect + LISTEN ok──▶ listening (cache empty, then filled by lookups)
//    ▲                               │
//    └── error / end / a heartbeat ──┘   (cache dropped; every request asks the
//        unanswered for HEARTBEAT_MS         database until LISTEN is back)
//
// A lookup that started before a notification arrived is not cached (the
// generation count): it may have read the key just before its revoke committed.
// An expired key is refused from the cache by its own expires_at, no notice needed.
//
// Use is recorded as last_used_at at most once a minute per key and process, off
// the request's path (a guarded UPDATE, so other processes' touches in the same
// minute change nothing either): never a write per request.

import pg from 'pg';
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
/** How often the listening connection is asked to answer, and how long it may take, before it is presumed lost. */
const HEARTBEAT_MS = 10_000;
const HEARTBEAT_DEADLINE_MS = 5_000;
const RECONNECT_MIN_MS = 100;
const RECONNECT_MAX_MS = 5_000;

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
  private listener: pg.Client | null = null;
  private listening = false;
  private stopped = false;
  private reconnectMs = RECONNECT_MIN_MS;
  private reconnectTimer: NodeJS.Timeout | null = null;
  private heartbeatTimer: NodeJS.Timeout | null = null;
  private readonly ttlMs: number;
  private readonly maxEntries: number;

  constructor(private readonly deps: AuthenticatorDeps) {
    this.ttlMs = deps.ttlMs ?? KEY_CACHE_TTL_MS;
    this.maxEntries = deps.maxEntries ?? KEY_CACHE_MAX;
  }

  /** Whether the cache is being trusted (the listener is up). */
  get trusted(): boolean {
    return this.listening;
  }

  /** Keys remembered now. */
  get size(): number {
    return this.cache.size;
  }

  /** Starts listening; resolves after the first attempt, whether or not it connected (it keeps trying). */
  async start(): Promise<void> {
    await this.connect();
    if (!this.listening && !this.stopped) {
      this.deps.log.warn('API key listener not connected yet: keys are checked in the database until it is');
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.lost();
  }

  /** The account a presented key opens at `now`, or null (malformed, unknown, revoked, expired). */
  async authenticate(presented: string, now = new Date()): Promise<Principal | null> {
    if (!isKeyShaped(presented)) return null;
    const digest = sha256(presented).toString('base64');
    const at = now.getTime();
    if (this.listening) {
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
    if (this.listening && generation === this.generation) this.remember(digest, grant, at);
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

  private async connect(): Promise<void> {
    if (this.stopped) return;
    const client = new pg.Client({
      ...this.deps.pool.options,
      ...(this.deps.listenTo ? { connectionString: this.deps.listenTo } : {}),
      application_name: 'handset-api-keys-listen',
    });
    this.listener = client;
    // A broken connection must not crash the process: it is noticed and replaced.
    client.on('error', (err) => this.lostUnexpectedly(client, err.message));
    client.on('end', () => this.lostUnexpectedly(client, 'connection ended'));
    client.on('notification', (msg) => {
      if (msg.channel !== API_KEY_CHANNEL) return;
      this.generation++;
      if (msg.payload) this.forget(msg.payload);
    });
    try {
      await client.connect();
      await client.query(`LISTEN ${API_KEY_CHANNEL}`);
    } catch (err) {
      this.lostUnexpectedly(client, (err as Error).message);
      return;
    }
    if (this.listener !== client) return; // lost (or stopped) while connecting
    // Anything cached before was cached while no notice could arrive.
    this.dropAll();
    this.listening = true;
    if (this.reconnectMs > RECONNECT_MIN_MS)
      this.deps.log.info('API key listener back: recently seen keys are cached again');
    this.reconnectMs = RECONNECT_MIN_MS;
    this.deps.metrics?.apiKeyListener.set(1);
    this.heartbeatTimer = setInterval(() => this.heartbeat(client), HEARTBEAT_MS);
    this.heartbeatTimer.unref();
  }

  /** A listener that cannot answer a trivial query in time is presumed lost (a silently dead TCP peer). */
  private heartbeat(client: pg.Client): void {
    const deadline = setTimeout(() => this.lostUnexpectedly(client, 'heartbeat unanswered'), HEARTBEAT_DEADLINE_MS);
    deadline.unref();
    client.query('SELECT 1').then(
      () => clearTimeout(deadline),
      (err: Error) => {
        clearTimeout(deadline);
        this.lostUnexpectedly(client, err.message);
      },
    );
  }

  private lostUnexpectedly(client: pg.Client, why: string): void {
    if (this.listener !== client) return; // an old connection's last words
    const wasListening = this.listening;
    this.lost();
    if (this.stopped) return;
    // One warning per outage; each failed reconnect after it is only debug.
    this.deps.log[wasListening ? 'warn' : 'debug'](
      { err: why, retryInMs: this.reconnectMs },
      'API key listener lost: keys are checked in the database until it is back',
    );
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      void this.connect();
    }, this.reconnectMs);
    this.reconnectTimer.unref();
    this.reconnectMs = Math.min(this.reconnectMs * 2, RECONNECT_MAX_MS);
  }

  private lost(): void {
    this.listening = false;
    this.deps.metrics?.apiKeyListener.set(0);
    this.dropAll();
    if (this.heartbeatTimer) clearInterval(this.heartbeatTimer);
    this.heartbeatTimer = null;
    const client = this.listener;
    this.listener = null;
    client?.end().catch(() => undefined);
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
