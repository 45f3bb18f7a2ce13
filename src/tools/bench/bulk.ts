// The bulk-send figure, end to end, as a customer running a campaign sees it:
// N messages created through the API (each with its Idempotency-Key, through the
// typed client), dispatched by the worker to the simulator, whose `sent` and
// `delivered` receipts come back through ingest with half of them duplicated,
// until the customer's endpoint has verified one message.sent and one
// message.delivered per message. Reports messages fully completed per second and
// the latency of each step, on this machine's clock: the database's timestamps
// (when a message was created and dispatched, when ingest stored each receipt) and
// the receiver's arrivals. Not the carrier's stated sent_at and completed_at: the
// simulator's timelines run 1/timeScale as fast as the wall clock, so the times it
// states are simulated ones (its 1 s delivery is stated 1 s after the send, and
// happens timeScale × 1 s after it).

import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { createClient } from '@handset/client';
import type { Receiver } from './receiver.js';
import { RECEIPTS_OF_MESSAGE } from './database.js';
import { Latencies, type LatencySummary } from './stats.js';

/** The simulator's persona that takes a message and delivers it. */
const DELIVERS = '+15555550100';

export interface BulkResult {
  messages: number;
  /** From the first create request to the last verified message.delivered. */
  seconds: number;
  completedPerSecond: number;
  /** API answers per second while creating (the campaign's submit rate). */
  createdPerSecond: number;
  /** Messages the carriers took per second, from the first send to the last (the sent_at stamps). */
  sentPerSecond: number;
  /** The most sends in any one whole second of the run, by sent_at (when each answer came). */
  busiestSecond: number;
  /** The same at the carrier, by arrival: of every number together, and of the busiest one number. */
  busiestAtCarrier: { all: number; oneNumber: number };
  steps: {
    /** POST /v1/messages, client side. */
    create: LatencySummary;
    /** created_at → dispatched_at (the worker took the send job). */
    queuedToDispatched: LatencySummary;
    /** dispatched_at → ingest stored the carrier's first `message.sent` receipt. */
    dispatchedToSent: LatencySummary;
    /** The `sent` receipt stored → the first `delivered` (message.finalized) receipt stored. */
    sentToDelivered: LatencySummary;
    /** The `delivered` receipt stored → the customer's endpoint verified message.delivered. */
    deliveredToWebhook: LatencySummary;
    /** Create request sent → message.delivered verified at the endpoint. */
    endToEnd: LatencySummary;
    /** Another account's single messages, sent while the campaign runs: created_at → dispatched_at. */
    bystanderDispatched: LatencySummary;
  };
  /** The carrier's webhooks during the phase, the other account's among them. */
  carrier: { receipts: number; duplicates: number };
  /** Customer events beyond one message.sent and one message.delivered per message (0 is right). */
  extraEvents: number;
  refusedCreates: number;
  /**
   * What PostgreSQL's busy backends were doing, sampled every 250 ms during the
   * run: "application wait_event" → samples, the most frequent first (what bounds it).
   */
  waits: [string, number][];
}

export interface BulkOptions {
  pool: pg.Pool;
  apiUrl: string;
  apiKey: string;
  /** The campaign's numbers, taken in turn. */
  from: readonly string[];
  receiver: Receiver;
  messages: number;
  /** Messages per create request: 1 is one `POST /v1/messages` each, more `POST /v1/messages/batch`. */
  perRequest: number;
  /** Create requests in flight at once. */
  concurrency: number;
  /** Gives up when no customer webhook has arrived for this long. */
  stallMs: number;
  /** The simulator's counters, read before and after. */
  carrierCounts: () => Promise<CarrierCounts>;
  /** Another account, which sends one message every BYSTANDER_EVERY_MS while the campaign runs. */
  bystander: { apiKey: string; from: string };
}

/** How often the other account sends during the campaign: a customer's one-off messages, not a load. */
const BYSTANDER_EVERY_MS = 250;

/** The simulator's counters the bulk send reads: webhooks it sent, of them duplicates, and those it gave up on. */
export interface CarrierCounts {
  attempts: number;
  duplicates: number;
  failedDeliveries: number;
  failedAttempts: Record<string, number>;
  busiestSecond: number;
  busiestSecondByNumber: Record<string, number>;
}

interface Row {
  id: string;
  created_at: Date;
  dispatched_at: Date | null;
  /** When ingest stored the first receipt of each kind (carrier_events.created_at). */
  sent_stored: Date | null;
  delivered_stored: Date | null;
}

export async function runBulkSend(opts: BulkOptions): Promise<BulkResult> {
  const waits = sampleWaits(opts.pool);
  let bystander: ReturnType<typeof sendMeanwhile> | undefined;
  try {
    const before = await opts.carrierCounts();
    opts.receiver.reset();
    bystander = sendMeanwhile(opts);
    const { campaign, ...measured } = await measure(opts, before);
    const bystanderDispatched = await dispatchedWhileWaiting(opts.pool, await bystander.stop(), campaign);
    return { ...measured, steps: { ...measured.steps, bystanderDispatched }, waits: await waits.stop() };
  } finally {
    await bystander?.stop();
    await waits.stop();
  }
}

type Measured = Omit<BulkResult, 'waits' | 'steps'> & {
  steps: Omit<BulkResult['steps'], 'bystanderDispatched'>;
  /** The campaign's message ids. */
  campaign: string[];
};

async function measure(opts: BulkOptions, before: CarrierCounts): Promise<Measured> {
  const hs = createClient({ apiKey: opts.apiKey, baseUrl: opts.apiUrl });
  const create = new Latencies();
  const startedAt = new Map<string, number>(); // message id → performance.now() at its request
  let refused = 0;
  const t0 = performance.now();
  let next = 0;
  const lane = async () => {
    while (next < opts.messages) {
      const first = next;
      next = Math.min(opts.messages, first + opts.perRequest);
      const indexes = Array.from({ length: next - first }, (_, k) => first + k);
      const at = performance.now();
      const ids = await createMessages(hs, indexes, opts.from);
      // Each message was created when its request was answered: one figure per message, as for single creates.
      const took = performance.now() - at;
      for (const id of ids) {
        create.record(took);
        if (id) startedAt.set(id, at);
        else refused++;
      }
    }
  };
  await Promise.all(Array.from({ length: opts.concurrency }, lane));
  const createdPerSecond = opts.messages / ((performance.now() - t0) / 1000);

  // Every message once sent and once delivered, at the endpoint: distinct (message, type) pairs, so that a
  // duplicate cannot stand in for one still missing.
  const wanted = startedAt.size * 2;
  // The campaign's own: the other account's endpoint is on the same receiver.
  const distinct = () =>
    new Set(opts.receiver.arrivals.filter((a) => startedAt.has(a.subjectId)).map((a) => `${a.subjectId} ${a.type}`))
      .size;
  await untilArrived(distinct, wanted, opts.stallMs, async () => {
    // Where the missing ones stand, so a stall says what it waited for.
    const { rows: states } = await opts.pool.query<{ status: string; n: number }>(
      `SELECT status, count(*)::int AS n FROM messages WHERE id = ANY($1) GROUP BY status ORDER BY status`,
      [[...startedAt.keys()]],
    );
    const { rows: pending } = await opts.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM webhook_deliveries d JOIN outbound_events e ON e.id = d.event_id
        WHERE d.status = 'pending' AND e.subject_id = ANY($1)`,
      [[...startedAt.keys()]],
    );
    // What the carrier said about a message still short of its end, as stored and as applied.
    const { rows: told } = await opts.pool.query<{ event_type: string; processed: boolean; error: string | null }>(
      `SELECT ce.event_type, ce.processed_at IS NOT NULL AS processed, ce.error
         FROM messages m JOIN carrier_events ce ON ${RECEIPTS_OF_MESSAGE}
        WHERE m.id = ANY($1) AND m.status NOT IN ('delivered', 'failed')
        ORDER BY ce.id LIMIT 6`,
      [[...startedAt.keys()]],
    );
    const events = told.map(
      (e) => `${e.event_type} ${e.processed ? 'processed' : 'pending'}${e.error ? ` (${e.error})` : ''}`,
    );
    const now = await opts.carrierCounts();
    const given = now.failedDeliveries - before.failedDeliveries;
    const answers = Object.entries(now.failedAttempts)
      .map(([why, n]) => [why, n - (before.failedAttempts[why] ?? 0)] as const)
      .filter(([, n]) => n > 0)
      .map(([why, n]) => `${why} ×${n}`);
    return `messages ${states.map((r) => `${r.status} ${r.n}`).join(', ')}; their deliveries pending ${pending[0]!.n}; carrier webhooks given up after every attempt ${given} (attempts answered ${answers.join(', ') || 'nothing else'}); carrier events about the unfinished: ${events.join(', ') || 'none'}`;
  });
  const end = performance.now();
  const ours = opts.receiver.arrivals.filter((a) => startedAt.has(a.subjectId));
  const deliveredAt = new Map<string, number>();
  for (const a of ours)
    if (a.type === 'message.delivered' && !deliveredAt.has(a.subjectId)) deliveredAt.set(a.subjectId, a.at);

  const { rows } = await opts.pool.query<Row>(
    `SELECT m.id, m.created_at, m.dispatched_at,
            min(ce.created_at) FILTER (WHERE ce.event_type = 'message.sent') AS sent_stored,
            min(ce.created_at) FILTER (WHERE ce.event_type = 'message.finalized') AS delivered_stored
       FROM messages m
       LEFT JOIN carrier_events ce ON ${RECEIPTS_OF_MESSAGE}
      WHERE m.id = ANY($1)
      GROUP BY m.id`,
    [[...startedAt.keys()]],
  );
  const between = (pick: (r: Row) => number | null) => {
    const l = new Latencies();
    for (const r of rows) {
      const v = pick(r);
      if (v !== null) l.record(v);
    }
    return l.summary();
  };
  const ms = (d: Date | null) => (d ? d.getTime() : null);
  const epoch = (perfAt: number) => performance.timeOrigin + perfAt;
  const after = await opts.carrierCounts();
  const { rows: pace } = await opts.pool.query<{ n: number; span: number | null; busiest: number | null }>(
    `SELECT count(*)::int AS n, extract(epoch FROM max(sent_at) - min(sent_at))::float8 AS span,
            (SELECT max(c)::int FROM (SELECT count(*) AS c FROM messages WHERE id = ANY($1)
                                       GROUP BY date_trunc('second', sent_at)) s) AS busiest
       FROM messages WHERE id = ANY($1) AND sent_at IS NOT NULL`,
    [[...startedAt.keys()]],
  );
  const p0 = pace[0]!;
  return {
    messages: startedAt.size,
    seconds: (end - t0) / 1000,
    completedPerSecond: startedAt.size / ((end - t0) / 1000),
    createdPerSecond,
    sentPerSecond: p0.span ? (p0.n - 1) / p0.span : 0,
    busiestSecond: p0.busiest ?? 0,
    // The simulator runs for this campaign alone, its numbers this campaign's.
    busiestAtCarrier: {
      all: after.busiestSecond,
      oneNumber: Math.max(0, ...opts.from.map((n) => after.busiestSecondByNumber[n] ?? 0)),
    },
    steps: {
      create: create.summary(),
      queuedToDispatched: between((r) => diff(ms(r.created_at), ms(r.dispatched_at))),
      dispatchedToSent: between((r) => diff(ms(r.dispatched_at), ms(r.sent_stored))),
      sentToDelivered: between((r) => diff(ms(r.sent_stored), ms(r.delivered_stored))),
      deliveredToWebhook: between((r) => {
        const at = deliveredAt.get(r.id);
        return at === undefined ? null : diff(ms(r.delivered_stored), epoch(at));
      }),
      endToEnd: between((r) => {
        const at = deliveredAt.get(r.id);
        const sent = startedAt.get(r.id);
        return at === undefined || sent === undefined ? null : at - sent;
      }),
    },
    carrier: { receipts: after.attempts - before.attempts, duplicates: after.duplicates - before.duplicates },
    extraEvents: ours.length - wanted,
    refusedCreates: refused,
    campaign: [...startedAt.keys()],
  };
}

/**
 * The campaign's creation step for messages `indexes` (each from its number in
 * turn): one POST /v1/messages for one, else one POST /v1/messages/batch, under
 * its own Idempotency-Key. Each message's id, or null where the API refused it.
 */
async function createMessages(
  hs: ReturnType<typeof createClient>,
  indexes: number[],
  from: readonly string[],
): Promise<(string | null)[]> {
  const message = (i: number) => ({
    from: from[i % from.length]!,
    to: DELIVERS,
    body: `Campaign message ${i}: your order has shipped.`,
  });
  const params = { header: { 'idempotency-key': randomUUID() } };
  if (indexes.length === 1) {
    const { data } = await hs.POST('/v1/messages', { params, body: message(indexes[0]!) });
    return [data?.id ?? null];
  }
  const { data } = await hs.POST('/v1/messages/batch', { params, body: { messages: indexes.map(message) } });
  return indexes.map((_, k) => data?.data[k]?.message?.id ?? null);
}

/**
 * Another account's messages, one at a time every BYSTANDER_EVERY_MS until stopped:
 * what a campaign does to everyone else's sends. Resolves with their ids.
 */
function sendMeanwhile(opts: BulkOptions) {
  const hs = createClient({ apiKey: opts.bystander.apiKey, baseUrl: opts.apiUrl });
  const ids: string[] = [];
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const { data } = await hs.POST('/v1/messages', {
        params: { header: { 'idempotency-key': randomUUID() } },
        body: { from: opts.bystander.from, to: DELIVERS, body: 'Your code is 123456' },
      });
      if (data) ids.push(data.id);
      await new Promise((r) => setTimeout(r, BYSTANDER_EVERY_MS));
    }
  })().catch(() => undefined); // the API gone: the campaign's own requests say so
  return {
    stop: async () => {
      stopped = true;
      await loop;
      return ids;
    },
  };
}

/**
 * created_at → dispatched_at of the other account's messages created while the
 * campaign still had messages waiting to be dispatched (not those sent after its
 * line was gone, which would flatter a dispatch that makes them wait).
 */
async function dispatchedWhileWaiting(pool: pg.Pool, ids: string[], campaign: string[]): Promise<LatencySummary> {
  const { rows } = await pool.query<{ ms: number }>(
    `SELECT extract(epoch FROM dispatched_at - created_at) * 1000 AS ms
       FROM messages
      WHERE id = ANY($1) AND dispatched_at IS NOT NULL
        AND created_at < (SELECT max(dispatched_at) FROM messages WHERE id = ANY($2))`,
    [ids, campaign],
  );
  const l = new Latencies();
  for (const r of rows) l.record(Number(r.ms));
  return l.summary();
}

/** Waits until `count()` reaches `n`; fails only when it has not grown for `stallMs` (a run may be long, not stalled). */
async function untilArrived(
  count: () => number,
  n: number,
  stallMs: number,
  explain: () => Promise<string>,
): Promise<void> {
  let seen = count();
  let since = performance.now();
  while (seen < n) {
    await new Promise((r) => setTimeout(r, 500));
    const now = count();
    if (now !== seen) [seen, since] = [now, performance.now()];
    else if (performance.now() - since > stallMs) {
      const why = await explain().catch((err: Error) => `could not tell why: ${err.message}`);
      throw new Error(`bulk: ${seen} of ${n} customer webhooks, and none for ${stallMs / 1000} s (${why})`);
    }
  }
}

const diff = (from: number | null, to: number | null) => (from === null || to === null ? null : to - from);

/** Samples pg_stat_activity until stopped (the bench's own sampling connection left out). */
function sampleWaits(pool: pg.Pool) {
  const counts = new Map<string, number>();
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const { rows } = await pool.query<{ what: string }>(
        `SELECT coalesce(nullif(application_name, ''), backend_type) || ' ' ||
                coalesce(wait_event_type || ':' || wait_event, 'on CPU') AS what
           FROM pg_stat_activity
          WHERE state = 'active' AND pid <> pg_backend_pid()`,
      );
      for (const { what } of rows) counts.set(what, (counts.get(what) ?? 0) + 1);
      await new Promise((r) => setTimeout(r, 250));
    }
  })().catch(() => undefined); // a sample lost to a closing pool is only a sample
  return {
    /** Stops sampling and says what was seen, the most frequent first. */
    async stop(): Promise<[string, number][]> {
      stopped = true;
      await loop;
      return [...counts].sort((a, b) => b[1] - a[1]).slice(0, 8);
    },
  };
}
