// The pipeline and delivery figures: a customer account whose webhook endpoint
// is the bench's verifying receiver, outbound messages already `sent` with
// carrier ids (as the dispatcher leaves them), and then either
//
//   receipts: one message.finalized per message plus a replay of each (so half
//   the receipts are duplicates) through the ingest process, with the worker
//   process turning each into message.delivered for the customer: time from
//   ingest's 200 for the stored receipt to the verified customer webhook, either
//   paced well below capacity (latency) or with a fixed number of messages in
//   flight (the sustained rate); or
//
//   deliveries: outbound events emitted in bulk through the outbox, timed from
//   their commit until every delivery is recorded as succeeded.

import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { accountCreate } from '../../accounts/accounts.js';
import { withTx } from '../../db/tx.js';
import { newId } from '../../db/ids.js';
import { endpointInsert } from '../../delivery/endpoints.sql.js';
import type { Keyring } from '../../delivery/keyring.js';
import { secretAdd } from '../../delivery/secrets.sql.js';
import { newEndpointSecret } from '../../delivery/signature.js';
import { emit } from '../../outbox/outbox.js';
import { RECEIPTS_OF_MESSAGE } from './database.js';
import { drive, WebhookClient } from './http-load.js';
import type { CpuSplit, CpuWatch } from './machine.js';
import type { Arrival, Receiver } from './receiver.js';
import { Latencies, summarize, type LatencySummary } from './stats.js';
import type { ReceiptFactory, SignedWebhook } from './webhooks.js';

export interface Customer {
  accountId: string;
  endpointId: string;
  secret: string;
}

/** An account with one webhook endpoint (all the bench's endpoints share the receiver's secret). */
export async function createCustomer(
  pool: pg.Pool,
  keys: Keyring,
  receiverUrl: string,
  secret: string = newEndpointSecret(),
): Promise<Customer> {
  return withTx(pool, async (tx) => {
    const account = await accountCreate(tx, 'Bench customer');
    const id = newId('ep');
    await endpointInsert(tx, {
      id,
      accountId: account.id,
      url: receiverUrl,
      description: 'bench receiver',
      eventTypes: [],
      cap: 1,
    });
    await secretAdd(tx, id, keys.seal(id, secret));
    return { accountId: account.id, endpointId: id, secret };
  });
}

interface SentMessage {
  id: string;
  carrierMessageId: string;
}

/** n outbound messages in `sent`, each with its own carrier message id. */
export async function createSentMessages(pool: pg.Pool, accountId: string, n: number): Promise<SentMessage[]> {
  const { rows } = await pool.query<{ id: string; carrier_message_id: string }>(
    `INSERT INTO messages (account_id, direction, from_number, to_number, body, status, encoding, segments,
                           carrier, carrier_message_id, sent_at)
     SELECT $1, 'outbound', '+13125550001', '+13125550002', 'Hello there!', 'sent', 'GSM-7', 1,
            'telnyx', gen_random_uuid()::text, now()
       FROM generate_series(1, $2::int)
     RETURNING id, carrier_message_id`,
    [accountId, n],
  );
  return rows.map((r) => ({ id: r.id, carrierMessageId: r.carrier_message_id }));
}

/**
 * Each message's first customer webhook (by its index), in arrival order, and
 * those beyond it told apart: a webhook-id that had arrived before (an attempt
 * sent again), or another event about the same message (a double effect).
 * Webhooks about anything else are left out.
 */
export function firstWebhooks(
  arrivals: readonly Arrival[],
  indexOf: ReadonlyMap<string, number>,
): { byMessage: Map<number, Arrival>; redelivered: number; otherEvents: string[] } {
  const byMessage = new Map<number, Arrival>();
  const webhookIds = new Set<string>();
  const otherEvents: string[] = [];
  let redelivered = 0;
  for (const a of arrivals) {
    const i = indexOf.get(a.subjectId);
    if (i === undefined) continue;
    const again = webhookIds.has(a.eventId);
    webhookIds.add(a.eventId);
    if (!byMessage.has(i)) byMessage.set(i, a);
    else if (again) redelivered++;
    else otherEvents.push(a.type);
  }
  return { byMessage, redelivered, otherEvents };
}

export interface PipelineResult {
  mode: 'paced' | 'window';
  messages: number;
  receipts: number;
  stored: number;
  duplicates: number;
  /** Non-200 answers and socket errors from ingest. */
  failures: number;
  /** Receipts per second over the whole run: first receipt sent → last customer webhook verified. */
  receiptsPerSecond: number;
  messagesPerSecond: number;
  /** Paced: the rate receipts were offered at. Window: messages kept in the pipeline at once. */
  offered: number;
  /** Ingest's 200 for the stored receipt → the customer's verified webhook, ms. */
  latency: LatencySummary;
  /** Ingest's own answer time for the receipts, ms. */
  ingestLatency: LatencySummary;
  /** Customer webhooks beyond one per message (must be 0: exactly once). */
  extraWebhooks: number;
  /** Of those, a webhook-id that had arrived before (an attempt sent again: at-least-once, deduplicable). */
  redelivered: number;
  /** Of those, the types of events other than the message's first (a second event: a double effect). */
  otherEvents: string[];
  deliveredInDb: number;
  /** Where each message's time went. */
  stages: PipelineStages;
  seconds: number;
}

/** How many receipts later a message's replay follows its first delivery. */
const REPLAY_DISTANCE = 4;

export interface PipelineOptions {
  pool: pg.Pool;
  ingestUrl: string;
  receiver: Receiver;
  factory: ReceiptFactory;
  accountId: string;
  /** HTTP connections to ingest. */
  concurrency: number;
  /**
   * paced: `messages` at `rate` messages per second (receipts at twice that), open loop.
   * window: for `seconds`, keep `inFlight` messages between their receipt and their
   * customer webhook (a new one starts as each webhook lands): the sustained rate.
   */
  mode:
    | { kind: 'paced'; rate: number; messages: number }
    | { kind: 'window'; inFlight: number; seconds: number; maxMessages: number };
}

type Item = { i: number; replay: boolean };

export async function runPipeline(opts: PipelineOptions): Promise<PipelineResult> {
  const mode = opts.mode;
  const messages = await createSentMessages(
    opts.pool,
    opts.accountId,
    mode.kind === 'paced' ? mode.messages : mode.maxMessages,
  );
  const indexOf = new Map(messages.map((m, i) => [m.id, i]));
  const first: SignedWebhook[] = [];
  const replay: SignedWebhook[] = [];
  for (const m of messages) {
    const eventId = randomUUID();
    first.push(opts.factory.receipt(m.carrierMessageId, eventId, 1));
    replay.push(opts.factory.receipt(m.carrierMessageId, eventId, 2)); // Telnyx's retry: same id, next attempt
  }
  const items: Item[] = [];
  for (let i = 0; i < messages.length; i++) {
    items.push({ i, replay: false });
    if (i >= REPLAY_DISTANCE) items.push({ i: i - REPLAY_DISTANCE, replay: true });
  }
  for (let i = Math.max(0, messages.length - REPLAY_DISTANCE); i < messages.length; i++)
    items.push({ i, replay: true });

  const acked = new Float64Array(messages.length).fill(NaN);
  const arrived = new Uint8Array(messages.length);
  const ingestLatency = new Latencies();
  let stored = 0;
  let duplicates = 0;
  let failures = 0;
  let receipts = 0;
  let originals = 0;
  const onResponse = (item: Item, status: number | null, body: string, endedAt: number) => {
    if (status !== 200) return void failures++;
    if (body.includes('"stored"')) {
      stored++;
      acked[item.i] = endedAt;
    } else duplicates++;
  };
  opts.receiver.reset();
  const started = performance.now();
  let ingestSummary: LatencySummary;

  if (mode.kind === 'paced') {
    const load = await drive({
      url: opts.ingestUrl,
      items,
      request: (item) => (item.replay ? replay[item.i]! : first[item.i]!),
      concurrency: opts.concurrency,
      rate: mode.rate * 2,
      onResponse,
    });
    failures += load.errors;
    receipts = items.length;
    originals = messages.length;
    ingestSummary = load.latency;
    await opts.receiver.waitFor(originals, 60_000 + originals * 20);
  } else {
    const client = new WebhookClient(opts.ingestUrl, opts.concurrency);
    const deadline = started + mode.seconds * 1000;
    let next = 0;
    let inPipeline = 0;
    const pending = new Set<Promise<void>>();
    const send = (item: Item) => {
      receipts++;
      const p = client.post(item.replay ? replay[item.i]! : first[item.i]!).then((r) => {
        if (r.status !== null) ingestLatency.record(r.ms);
        onResponse(item, r.status, r.status === null ? '' : r.body, r.endedAt);
        pending.delete(p);
      });
      pending.add(p);
    };
    const pump = () => {
      while (performance.now() < deadline && inPipeline < mode.inFlight && next < items.length) {
        const item = items[next++]!;
        if (!item.replay) {
          inPipeline++;
          originals++;
        }
        send(item);
      }
    };
    opts.receiver.onArrival = (a) => {
      const i = indexOf.get(a.subjectId);
      if (i === undefined || arrived[i]) return;
      arrived[i] = 1;
      inPipeline--;
      pump();
    };
    pump();
    await new Promise<void>((resolve, reject) => {
      const check = setInterval(() => {
        if (performance.now() > deadline + 60_000) {
          clearInterval(check);
          reject(new Error(`pipeline: ${inPipeline} messages still without a customer webhook a minute after the run`));
        }
        if (performance.now() >= deadline && inPipeline === 0) {
          clearInterval(check);
          resolve();
        }
        pump(); // a message whose receipt failed never lands; keep the window honest
      }, 5);
    });
    await Promise.all(pending);
    client.close();
    ingestSummary = ingestLatency.summary();
  }

  // Anything beyond one webhook per message would show up now.
  await new Promise((r) => setTimeout(r, 300));
  const { byMessage, redelivered, otherEvents } = firstWebhooks(opts.receiver.arrivals, indexOf);
  const latency: number[] = [];
  let lastArrival = started;
  for (const [i, a] of byMessage) {
    lastArrival = Math.max(lastArrival, a.at);
    const ack = acked[i]!;
    // The webhook can be handled by this process a hair before the 200 that preceded it.
    if (!Number.isNaN(ack)) latency.push(Math.max(0, a.at - ack));
  }
  opts.receiver.onArrival = null;
  const seconds = (lastArrival - started) / 1000;
  const used = messages.slice(0, originals).map((m) => m.id);
  const { rows } = await opts.pool.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM messages WHERE id = ANY($1) AND status = 'delivered'`,
    [used],
  );
  const stages = await stagesOf(opts.pool, used, byMessage, indexOf);
  return {
    mode: mode.kind,
    messages: originals,
    receipts,
    stored,
    duplicates,
    failures,
    receiptsPerSecond: receipts / seconds,
    messagesPerSecond: byMessage.size / seconds,
    offered: mode.kind === 'paced' ? mode.rate * 2 : mode.inFlight,
    latency: summarize(latency),
    ingestLatency: ingestSummary,
    extraWebhooks: redelivered + otherEvents.length,
    redelivered,
    otherEvents,
    deliveredInDb: rows[0]!.n,
    seconds,
    stages,
  };
}

/** Where a message's time went, in three legs: from the rows the worker wrote and the receiver's clock. */
export interface PipelineStages {
  /** Stored by ingest → claimed by the worker's carrier-event relay: the wait in front of the relay. */
  storedToClaimed: LatencySummary;
  /** Claimed → the customer webhook's first attempt started: the relay's batch, its commit and the hand-off. */
  claimedToSent: LatencySummary;
  /** Attempt started → verified at the receiver: the HTTP request. */
  sentToVerified: LatencySummary;
}

async function stagesOf(
  pool: pg.Pool,
  messageIds: string[],
  byMessage: ReadonlyMap<number, Arrival>,
  indexOf: ReadonlyMap<string, number>,
): Promise<PipelineStages> {
  const { rows } = await pool.query<{ id: string; stored: Date; claimed: Date; sent: Date }>(
    `SELECT m.id, ce.created_at AS stored, ce.processed_at AS claimed, a.started_at AS sent
       FROM messages m
       JOIN carrier_events ce ON ${RECEIPTS_OF_MESSAGE}
       JOIN outbound_events oe ON oe.subject_id = m.id
       JOIN webhook_deliveries d ON d.event_id = oe.id
       JOIN webhook_attempts a ON a.delivery_id = d.id AND a.attempt = 1
      WHERE m.id = ANY ($1)`,
    [messageIds],
  );
  const legs = { storedToClaimed: [] as number[], claimedToSent: [] as number[], sentToVerified: [] as number[] };
  for (const r of rows) {
    const i = indexOf.get(r.id);
    const arrival = i === undefined ? undefined : byMessage.get(i);
    if (!arrival) continue;
    // The relay stamps processed_at with its batch's start, before its claim.
    legs.storedToClaimed.push(r.claimed.getTime() - r.stored.getTime());
    legs.claimedToSent.push(r.sent.getTime() - r.claimed.getTime());
    legs.sentToVerified.push(performance.timeOrigin + arrival.at - r.sent.getTime());
  }
  return {
    storedToClaimed: summarize(legs.storedToClaimed),
    claimedToSent: summarize(legs.claimedToSent),
    sentToVerified: summarize(legs.sentToVerified),
  };
}

export interface DeliveryResult {
  endpoints: number;
  events: number;
  /** Events per second: commit of the batch → every delivery recorded as succeeded. */
  rate: number;
  seconds: number;
  /** Commit → verified arrival at the receiver, ms. */
  latency: LatencySummary;
  rejected: number;
}

/**
 * Emits `events` outbound events at once, round-robin over the customers (one
 * endpoint each), and measures their delivery from the emit's commit: the rate,
 * and the CPU split of the watch it starts then (emitting them is set-up).
 */
export async function runDelivery(opts: {
  pool: pg.Pool;
  receiver: Receiver;
  customers: Customer[];
  events: number;
  watchCpu: () => CpuWatch;
}): Promise<DeliveryResult & { cpu: CpuSplit }> {
  opts.receiver.reset();
  const ids = await withTx(opts.pool, async (tx) => {
    const out: string[] = [];
    const occurredAt = new Date();
    for (let i = 0; i < opts.events; i++) {
      const customer = opts.customers[i % opts.customers.length]!;
      const { eventId } = await emit(tx, {
        accountId: customer.accountId,
        tenantId: null,
        type: 'message.delivered',
        subjectId: `msg_bench${i}`,
        data: { id: `msg_bench${i}`, status: 'delivered', body: 'Hello there!' },
        occurredAt,
      });
      out.push(eventId);
    }
    return out;
  });
  const committed = performance.now();
  const watch = opts.watchCpu();
  await opts.receiver.waitFor(opts.events, 60_000 + opts.events * 30);
  for (;;) {
    const { rows } = await opts.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM webhook_deliveries WHERE event_id = ANY($1) AND status = 'succeeded'`,
      [ids],
    );
    if (rows[0]!.n >= opts.events) break;
    await new Promise((r) => setTimeout(r, 5));
  }
  const seconds = (performance.now() - committed) / 1000;
  return {
    endpoints: opts.customers.length,
    events: opts.events,
    rate: opts.events / seconds,
    seconds,
    latency: summarize(opts.receiver.arrivals.map((a) => a.at - committed)),
    rejected: opts.receiver.rejected,
    cpu: watch.stop(),
  };
}
