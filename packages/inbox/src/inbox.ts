// createInbox: Handset's at-least-once deliveries turned into exactly-once
// effects in the customer's own PostgreSQL. A delivery is verified first; then,
// in one transaction, its event id is inserted (ON CONFLICT DO NOTHING) before
// anything else, the subject's sequence is advanced by a guarded statement, and
// the handler runs on that same transaction. A copy of the event arriving at the
// same moment waits on the first one's uncommitted row: if that commits, the
// copy is a duplicate; if it rolls back, the copy runs the handler.

import { type HandsetEvent, type InboxEvent, parseEvent } from './event.js';
import { PRUNE_BATCH, statements } from './inbox.sql.js';
import { type ClientOf, type InboxStore, type Isolation, type PgClient, type PgPool, pgStore } from './store.js';
import { bodyText, type HeaderBag, type RawBody, Verifier } from './verify.js';
import { fetchHandler, nodeHandler, type FetchHandler, type NodeHandler } from './http.js';

export type Ordering = 'skip-stale' | 'deliver-stale';

export const RESULTS = ['handled', 'duplicate', 'stale', 'invalid_signature', 'bad_request', 'handler_failed'] as const;
export type Result = (typeof RESULTS)[number];

/** What became of a delivery, and the HTTP status to answer it with. */
export type Outcome =
  | { status: 200; result: 'handled' | 'duplicate' | 'stale'; eventId: string }
  | { status: 401; result: 'invalid_signature'; reason: string; eventId?: string }
  | { status: 400; result: 'bad_request'; reason: string; eventId?: string }
  | { status: 500; result: 'handler_failed'; error: unknown; eventId?: string };

/** Your code: runs once per event id; every write through `tx` commits with the remembered id or not at all. */
export type Handler<Native> = (event: InboxEvent, tx: Native) => unknown;

export interface InboxOptions {
  /** The endpoint's signing secret, or every secret it may sign with (during a rotation: old and new). */
  secret: string | readonly string[];
  /** How far webhook-timestamp may be from now, either way. Default 300. */
  toleranceSeconds?: number;
  /** The inbox table, optionally schema-qualified; its subjects table is `<table>_subjects`. Default `handset_inbox`. */
  table?: string;
  /** `skip-stale` (default): an event older than one handled for the same subject is not handed to the handler. */
  ordering?: Ordering;
  /**
   * How long a delivery waits on a lock (a copy of itself still in flight, the
   * subject's row, or the handler's own waits: it holds for the whole
   * transaction) before answering 500 so that the sender retries; below the
   * sender's 15 s timeout. Default 10,000 ms; 0: no limit.
   */
  lockTimeoutMs?: number;
  /** The transaction's isolation level; default: the database's own (READ COMMITTED unless configured). */
  isolation?: Isolation;
  /**
   * Serialization failures and deadlocks (40001, 40P01) retry the whole
   * transaction this many times before answering 500. Default 3.
   */
  retries?: number;
  /** The largest body nodeHandler reads. Default 1 MiB. */
  maxBodyBytes?: number;
  /** Told of every outcome, for logs and metrics. */
  onOutcome?: (outcome: Outcome) => void;
  /** Told of every 500 (the handler threw, the database refused); default: console.error. */
  onError?: (error: unknown, context: { eventId?: string; type?: string }) => void;
  /** The clock, for tests. */
  now?: () => Date;
}

export interface Inbox<Native> {
  /** Creates the tables if missing; safe to run at every start, from several processes at once. */
  migrate(): Promise<void>;
  /** Verifies one delivery and runs `handler` for it at most once per event id. */
  receive(request: { body: RawBody; headers: HeaderBag }, handler: Handler<Native>): Promise<Outcome>;
  /** `(req, res)` for node:http and Express (mounted before any body parser, or after express.raw()). */
  nodeHandler(handler: Handler<Native>): NodeHandler;
  /** `(request) => Response` for Next.js route handlers, Hono, Bun and Deno. */
  fetchHandler(handler: Handler<Native>): FetchHandler;
  /** Forgets event ids received longer ago than `olderThan` ('30d', '12h', '90m', '45s'); returns how many. */
  prune(options: { olderThan: string }): Promise<number>;
}

export function createInbox<Pool extends PgPool>(
  options: InboxOptions & { pool: Pool; store?: undefined },
): Inbox<ClientOf<Pool>>;
export function createInbox<Native>(
  options: InboxOptions & { store: InboxStore<Native>; pool?: undefined },
): Inbox<Native>;
export function createInbox(
  options: InboxOptions & { pool?: PgPool<PgClient> | undefined; store?: InboxStore<unknown> | undefined },
): Inbox<unknown> {
  const store = options.store ?? (options.pool ? pgStore(options.pool) : null);
  if (!store || (options.store && options.pool)) throw new TypeError('createInbox: give either pool (pg) or store');
  const tolerance = nonNegative(options.toleranceSeconds, 300, 'toleranceSeconds');
  const lockTimeout = String(Math.round(nonNegative(options.lockTimeoutMs, 10_000, 'lockTimeoutMs')));
  const retries = nonNegative(options.retries, 3, 'retries');
  const ordering = options.ordering ?? 'skip-stale';
  if (ordering !== 'skip-stale' && ordering !== 'deliver-stale') {
    throw new TypeError(`ordering: expected 'skip-stale' or 'deliver-stale', got ${JSON.stringify(ordering)}`);
  }
  const secrets = typeof options.secret === 'string' ? [options.secret] : [...(options.secret ?? [])];
  const verifier = new Verifier(secrets, tolerance);
  const sql = statements(options.table ?? 'handset_inbox');
  const now = options.now ?? (() => new Date());
  const onError =
    options.onError ??
    ((error: unknown, context: { eventId?: string }) =>
      console.error(`@handset/inbox: ${context.eventId ?? 'a delivery'} not handled (answered 500):`, error));
  const transactionOptions = { isolation: options.isolation };

  async function receive(request: { body: RawBody; headers: HeaderBag }, handler: Handler<unknown>): Promise<Outcome> {
    const outcome = await decide(request, handler);
    options.onOutcome?.(outcome);
    return outcome;
  }

  async function decide(request: { body: RawBody; headers: HeaderBag }, handler: Handler<unknown>): Promise<Outcome> {
    const text = bodyText(request.body);
    const verdict = verifier.verify(request.headers, text, Math.floor(now().getTime() / 1000));
    if (!verdict.ok) return { status: 401, result: 'invalid_signature', reason: verdict.reason };
    const eventId = verdict.id;
    const parsed = parseEvent(text, eventId);
    if (!parsed.ok) return { status: 400, result: 'bad_request', reason: parsed.reason, eventId };
    const { event, subject, sequence } = parsed;
    const ordered = subject !== null && sequence !== null;

    for (let attempt = 0; ; attempt++) {
      try {
        const result = await store!.transaction(async (tx, native) => {
          // The id first: a concurrent copy stops here, waiting, until this transaction ends.
          const arrived = await tx.exec(sql.arrive, [
            eventId,
            event.type,
            lockTimeout,
            ordered ? subject : null,
            ordered ? sequence : null,
          ]);
          if (arrived === 0) return 'duplicate' as const;
          const stale = ordered && arrived < 2;
          if (stale && ordering === 'skip-stale') return 'stale' as const;
          await handler(withStale(event, stale), native);
          return 'handled' as const;
        }, transactionOptions);
        return { status: 200, result, eventId };
      } catch (error) {
        // A serialization failure or deadlock is the database asking for the whole transaction
        // again: on the next try the id is remembered (a duplicate) or the handler runs afresh.
        if (attempt < retries && retryable(error)) {
          await new Promise((r) => setTimeout(r, Math.random() * 10 * (attempt + 1)));
          continue;
        }
        onError(error, { eventId, type: event.type });
        return { status: 500, result: 'handler_failed', error, eventId };
      }
    }
  }

  const inbox: Inbox<unknown> = {
    async migrate() {
      await store.transaction(async (tx) => {
        for (const statement of sql.migrate) await tx.exec(statement, []);
      });
    },
    receive,
    nodeHandler: (handler) => nodeHandler(receive, handler, { maxBodyBytes: options.maxBodyBytes, onError }),
    fetchHandler: (handler) => fetchHandler(receive, handler, { onError }),
    async prune({ olderThan }) {
      const seconds = durationSeconds(olderThan);
      let total = 0;
      for (;;) {
        const n = await store.transaction((tx) => tx.exec(sql.prune, [seconds, PRUNE_BATCH]));
        total += n;
        if (n < PRUNE_BATCH) return total;
      }
    },
  };
  return inbox;
}

function withStale(event: HandsetEvent, stale: boolean): InboxEvent {
  return { ...event, stale };
}

const RETRYABLE = new Set(['40001', '40P01']);

function retryable(error: unknown): boolean {
  for (let e = error as { code?: unknown; cause?: unknown } | undefined, depth = 0; e && depth < 3; depth++) {
    if (typeof e.code === 'string' && RETRYABLE.has(e.code)) return true;
    e = e.cause as typeof e;
  }
  return false;
}

function nonNegative(v: number | undefined, fallback: number, name: string): number {
  if (v === undefined) return fallback;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
    throw new TypeError(`${name}: expected a number ≥ 0, got ${JSON.stringify(v)}`);
  }
  return v;
}

const UNITS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86_400 };

/** '30d' → 2,592,000. */
export function durationSeconds(text: string): number {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$/.exec(String(text));
  if (!m)
    throw new TypeError(
      `olderThan: expected a duration such as '30d', '12h', '90m' or '45s', got ${JSON.stringify(text)}`,
    );
  return Number(m[1]) * UNITS[m[2]!]!;
}
