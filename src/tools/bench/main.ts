// `npm run bench`: how close Handset gets to what PostgreSQL itself can do on
// this machine, measured against baselines taken in the same run so the ratios
// hold on a noisy machine. It starts its own PostgreSQL (embedded, or a fresh
// database on DATABASE_URL), runs the roles as real `handset serve` processes,
// loads them with pre-signed Telnyx webhooks, prints one table and writes every
// number to bench/results/<time>.json (and latest.json).
//
// Phases (each can be picked with --only): ingest (unique events at several
// concurrencies with baselines A, A1, B over pg and H, ingest's server with nothing
// stored; duplicates; half-peak latency),
// pipeline (queue floor, receipts → customer webhooks), delivery (1 and 8
// endpoints), bulk (a campaign end to end: API → simulator → receipts → customer), growth (10k vs 1M stored carrier events), scale (1, 2, 4 ingest
// processes, each against as many writers over pg), inbox (@handset/inbox beside the same handler without it).

import { mkdir, writeFile } from 'node:fs/promises';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { createClient } from '@handset/client';
import { apiKeyCreate } from '../../accounts/accounts.js';
import { newId } from '../../db/ids.js';
import { withTx } from '../../db/tx.js';
import { endpointInsert } from '../../delivery/endpoints.sql.js';
import { keyring, newSecretKey } from '../../delivery/keyring.js';
import { secretAdd } from '../../delivery/secrets.sql.js';
import { newEndpointSecret } from '../../delivery/signature.js';
import { emit } from '../../outbox/outbox.js';
import { createLogger } from '../../telemetry/log.js';
import { runStatement, type Statement } from './baselines.js';
import {
  carrierEventCount,
  checkpoint,
  carrierEventSizes,
  fillCarrierEvents,
  openBenchDatabase,
  settleCarrierEvents,
  resetIngestTables,
  type BenchDatabase,
} from './database.js';
import { drive, hammer } from './http-load.js';
import { findPostmaster, machineInfo, watchCpu, type CpuSplit, type CpuWatch } from './machine.js';
import { parseOptions, type BenchOptions, type Phase } from './options.js';
import { createCustomer, runDelivery, runPipeline, type Customer } from './pipeline.js';
import { measureQueueFloor } from './queue.js';
import { startReceiver, type Receiver } from './receiver.js';
import {
  cpuPerAnswered,
  cpuPerStored,
  evaluateTargets,
  renderTable,
  type BenchReport,
  type BulkReport,
  type GrowthPoint,
  type IngestPoint,
  type Measured,
} from './report.js';
import {
  spawnFloor,
  spawnRole,
  spawnSimulator,
  type BenchRole,
  type RoleProcess,
  type SimulatorProcess,
} from './roles.js';
import { runBulkSend, type CarrierCounts } from './bulk.js';
import { measureVerify } from './verify.js';
import { ReceiptFactory, type SignedWebhook } from './webhooks.js';
import { inboxPhase, inboxTable, inboxTargets } from './inbox.js';

const WORKER_CONCURRENCY = 10; // the worker role's default (HANDSET_WORKER_CONCURRENCY)

/** What the phases share: the database, the processes running, the carrier's key, the customers. */
class Bench {
  private readonly running = new Set<RoleProcess>();
  readonly factory = new ReceiptFactory();
  private receiver: Receiver | null = null;
  private readonly secret = newEndpointSecret();
  readonly secretKeyBase64 = newSecretKey();
  private readonly customers: Customer[] = [];
  /** Messages per second of the paced pipeline runs (set by the pipeline phase). */
  pacedRate: number;

  constructor(
    readonly opts: BenchOptions,
    readonly db: BenchDatabase,
    readonly postmaster: number | null,
    readonly report: BenchReport,
  ) {
    this.pacedRate = opts.pipelineRate;
  }

  private readonly profileDir = () => (this.opts.profile ? path.resolve(this.opts.outDir, 'profiles') : undefined);

  async start(role: BenchRole, extra?: Record<string, string>): Promise<RoleProcess> {
    const p = await spawnRole(
      role,
      {
        databaseUrl: this.db.url,
        telnyxPublicKey: this.factory.publicKeyBase64,
        secretKey: this.secretKeyBase64,
        ...(extra ? { extra } : {}),
      },
      { profileDir: this.profileDir() },
    );
    this.running.add(p);
    return p;
  }

  /** Baseline H (http-floor.ts): ingest's server with nothing written. */
  async startFloor(): Promise<RoleProcess> {
    const p = await spawnFloor(
      { databaseUrl: this.db.url, telnyxPublicKey: this.factory.publicKeyBase64 },
      { profileDir: this.profileDir() },
    );
    this.running.add(p);
    return p;
  }

  /** The carrier, `handset sim` with these flags, as a process of its own. */
  async startSimulator(flags: string[]): Promise<SimulatorProcess> {
    const p = await spawnSimulator(flags, { profileDir: this.profileDir() });
    this.running.add(p);
    return p;
  }

  async stop(...ps: RoleProcess[]): Promise<void> {
    await Promise.all(ps.map((p) => p.stop()));
    for (const p of ps) this.running.delete(p);
  }

  async stopAll(): Promise<void> {
    await this.stop(...this.running);
  }

  /** One baseline statement at concurrency c, from an empty table (or replaying ids). */
  async statement(s: Statement, c: number, replay?: string[], writers?: number): Promise<Measured> {
    if (!replay) await resetIngestTables(this.db.pool);
    const before = await carrierEventCount(this.db.pool);
    const r = await measureStatement(this, s, c, replay, writers);
    return { ...r, stored: (await carrierEventCount(this.db.pool)) - before };
  }

  /** Closed-loop HTTP load of unique events against ingest processes, from an empty table. */
  async ingest(ps: RoleProcess[], c: number, expectedRate: number): Promise<Measured & { sent: SignedWebhook[] }> {
    await resetIngestTables(this.db.pool);
    const { duration, warmup } = this.opts;
    const webhooks = this.factory.unique(Math.ceil(expectedRate * 1.6 * (duration + warmup)) + 500);
    const { from, ...r } = await this.load(ps, c, webhooks);
    if (r.exhausted)
      this.report.notes.push(
        `ingest c=${c} (${ps.length} process): the pre-signed requests ran out; the run ended early`,
      );
    return { ...r, sent: webhooks.slice(from, from + r.used) };
  }

  /**
   * The same, replaying webhooks signed for an earlier run: to ingest, which has
   * stored them, each is a duplicate; to the floor, which keeps nothing, each is new.
   */
  async replay(ps: RoleProcess[], c: number, sent: SignedWebhook[], perSecond = 10_000): Promise<Measured> {
    if (sent.length === 0) throw new Error(`${ps[0]!.role} c=${c}: no webhooks to replay`);
    const need = Math.ceil(perSecond * (this.opts.duration + this.opts.warmup)); // more than the rate ever seen
    const webhooks: SignedWebhook[] = [];
    while (webhooks.length < need) webhooks.push(...sent);
    const { from: _from, used: _used, ...r } = await this.load(ps, c, webhooks);
    const role = ps[0]!.role;
    if (r.exhausted) this.report.notes.push(`${role} c=${c}: the replayed requests ran out; the run ended early`);
    // A signature older than the tolerance is refused, and a refusal is cheap: it must not pass for an answer.
    const refused = r.requests - (r.statuses['200'] ?? 0);
    if (refused > 0) this.report.notes.push(`${role} c=${c}: ${refused} replayed requests not answered 200`);
    return r;
  }

  /** Warm-up, then the measured run with its CPU split and the rows it added. */
  private async load(ps: RoleProcess[], c: number, webhooks: SignedWebhook[]) {
    const urls = ps.map((p) => p.url!);
    let from = 0;
    if (this.opts.warmup > 0) from = (await hammer({ urls, connections: c, seconds: this.opts.warmup, webhooks })).used;
    const before = await carrierEventCount(this.db.pool);
    const watch = watchCpu(Object.fromEntries(ps.map((p, i) => [`${p.role}${i}`, p.pid])), this.postmaster);
    const r = await hammer({ urls, connections: c, seconds: this.opts.duration, webhooks, from });
    const cpu = watch.stop();
    return { ...r, cpu, stored: (await carrierEventCount(this.db.pool)) - before, from };
  }

  /** The receiver and `n` customers, each with its own endpoint on it (created once, reused). */
  async customersAndReceiver(n = 1): Promise<{ receiver: Receiver; customers: Customer[] }> {
    if (!this.receiver) this.receiver = await startReceiver(() => this.secret);
    while (this.customers.length < n) {
      this.customers.push(
        await createCustomer(
          this.db.pool,
          keyring([Buffer.from(this.secretKeyBase64, 'base64')]),
          `${this.receiver.url}/${this.customers.length}`,
          this.secret,
        ),
      );
    }
    return { receiver: this.receiver, customers: this.customers.slice(0, n) };
  }

  /** A new account whose endpoint is the receiver (at its own path), with an API key. */
  async freshCustomer(name: string): Promise<{ receiver: Receiver; customer: Customer; apiKey: string }> {
    const { receiver } = await this.customersAndReceiver(0);
    const keys = keyring([Buffer.from(this.secretKeyBase64, 'base64')]);
    const customer = await createCustomer(this.db.pool, keys, `${receiver.url}/${name}`, this.secret);
    const apiKey = await withTx(this.db.pool, async (tx) => (await apiKeyCreate(tx, customer.accountId)).key);
    return { receiver, customer, apiKey };
  }

  async closeReceiver(): Promise<void> {
    await this.receiver?.close();
  }

  /** Paced at `rate` messages/s for the measurement time, or (no rate) the sustained window run. */
  async pipeline(ingest: RoleProcess, worker: RoleProcess, rate?: number) {
    const { receiver, customers } = await this.customersAndReceiver(1);
    await checkpoint(this.db.pool);
    const watch = watchCpu({ ingest: ingest.pid, worker: worker.pid }, this.postmaster);
    const { duration } = this.opts;
    const r = await runPipeline({
      pool: this.db.pool,
      ingestUrl: ingest.url!,
      receiver,
      factory: this.factory,
      accountId: customers[0]!.accountId,
      concurrency: this.opts.pipelineConcurrency,
      mode: rate
        ? { kind: 'paced', rate, messages: Math.max(20, Math.round(rate * duration)) }
        : {
            kind: 'window',
            inFlight: this.opts.pipelineWindow,
            seconds: duration,
            maxMessages: this.opts.pipelineMessages,
          },
    });
    if (r.extraWebhooks > 0) {
      const others = r.otherEvents.length > 0 ? ` (${[...new Set(r.otherEvents)].join(', ')})` : '';
      this.report.notes.push(
        `pipeline: ${r.extraWebhooks} customer webhooks beyond one per message: ${r.redelivered} a webhook-id ` +
          `sent again, ${r.otherEvents.length} another event about the same message${others}`,
      );
    }
    if (r.deliveredInDb !== r.messages)
      this.report.notes.push(`pipeline: ${r.deliveredInDb} of ${r.messages} messages delivered in the database`);
    return { ...r, cpu: watch.stop() };
  }
}

const log = (line: string) => process.stderr.write(`${line}\n`);
const fmt = (m: Measured) =>
  `${Math.round(m.rate).toLocaleString('en-US')}/s  p50 ${m.latency.p50.toFixed(2)} ms  p99 ${m.latency.p99.toFixed(2)} ms  (${m.requests} req${m.errors ? `, ${m.errors} errors` : ''})`;

async function ingestPhase(b: Bench): Promise<void> {
  b.report.verify = measureVerify(b.factory.unique(1)[0]!.body);
  const v = b.report.verify.micros;
  log(
    `  verify (${b.report.verify.bodyBytes} B): libsodium ${v.libsodium?.toFixed(1)} µs, node:crypto ${v['node:crypto']?.toFixed(1)} µs`,
  );
  const ingest = await b.start('ingest');
  const floor = await b.startFloor();
  try {
    for (const c of b.opts.concurrencies) {
      const A = await b.statement('A', c);
      log(`  c=${c} baseline A   ${fmt(A)}`);
      const A1 = c > 1 ? await b.statement('A1', c) : undefined;
      if (A1) log(`  c=${c} 1 event/tx   ${fmt(A1)}`);
      const B = await b.statement('B', c);
      log(`  c=${c} baseline B   ${fmt(B)}`);
      const N = c === 16 ? await b.statement('N', c) : undefined;
      if (N) log(`  c=${c} insert+notify ${fmt(N)}`);
      const run = await b.ingest([ingest], c, Math.max(A.rate, B.rate));
      const { sent, ...measured } = run;
      const perStored = cpuPerStored(measured);
      log(`  c=${c} ingest       ${fmt(measured)}  stored ${measured.stored}, CPU ${perStored?.toFixed(0)} µs/webhook`);
      // The floor verifies what it answers but keeps nothing, so the same signed webhooks serve again.
      // Not at c=1, which has no CPU target: there each request is a wake-up of an idle process.
      const H = c > 1 ? await b.replay([floor], c, sent, 30_000) : undefined;
      if (H) log(`  c=${c} H, nothing stored ${fmt(H)}  CPU ${cpuPerAnswered(H)?.toFixed(0)} µs/request`);
      const point: IngestPoint = {
        concurrency: c,
        ingest: measured,
        A,
        B,
        ...(A1 ? { A1 } : {}),
        ...(N ? { N } : {}),
        ...(H ? { H } : {}),
      };
      b.report.ingest.push(point);

      if (c === Math.max(...b.opts.concurrencies)) {
        // Duplicates: the events of this run are stored; replay them.
        const dupIngest = await b.replay([ingest], c, sent);
        log(`  c=${c} duplicates   ${fmt(dupIngest)}  stored ${dupIngest.stored}`);
        const dupA = await b.statement(
          'A',
          c,
          sent.map((w) => w.eventId),
        );
        log(`  c=${c} dup. base A  ${fmt(dupA)}`);
        b.report.duplicates = { concurrency: c, ingest: dupIngest, A: dupA };
      }
    }

    // Half of the peak, open loop: the latency a carrier sees on a busy but not saturated day.
    const peak = Math.max(...b.report.ingest.map((p) => p.ingest.rate));
    const offered = Math.max(1, Math.round(peak / 2));
    await resetIngestTables(b.db.pool);
    const webhooks = b.factory.unique(Math.ceil(offered * b.opts.duration));
    const watch = watchCpu({ ingest: ingest.pid }, b.postmaster);
    const r = await drive({ url: ingest.url!, items: webhooks, request: (w) => w, concurrency: 64, rate: offered });
    b.report.halfPeak = { offered, ingest: { ...r, cpu: watch.stop() } };
    log(`  half peak (${offered}/s) ${fmt(b.report.halfPeak.ingest)}`);
  } finally {
    await b.stop(ingest, floor);
    await resetIngestTables(b.db.pool);
  }
}

let bulkRuns = 0;
/** The paced campaign: this rate on each of this many numbers. */
const PACED_MPS = 50;
const PACED_NUMBERS = 4;

/** One run of the bulk phase: how messages are dispatched, how many, from how many numbers at what rate. */
/** A campaign's messages per batch create (the API's largest batch is 1,000). */
const BULK_PER_REQUEST = 500;

interface BulkRun {
  label: string;
  dispatch: 'batched' | 'jobs';
  /** Messages per create request: 1 is one `POST /v1/messages` each, more `POST /v1/messages/batch`. */
  perRequest: number;
  messages: number;
  numbers: number;
  mps?: number;
}

/**
 * The bulk send (bulk.ts), against the simulator as the carrier: it answers sends,
 * says `sent` and `delivered` for each, and duplicates half of those webhooks. It
 * runs as `handset sim` in a process of its own, so that its answers do not wait
 * on the load generator's event loop and its CPU is its own.
 */
async function bulkPhase(b: Bench, run: BulkRun): Promise<BulkReport> {
  const roles: RoleProcess[] = [];
  const sim = await b.startSimulator([
    '--webhook-url',
    '',
    '--time-scale',
    '0.01',
    '--seed',
    'bench-bulk',
    '--duplicate-rate',
    '0.5',
  ]);
  const control = async (method: 'GET' | 'PUT', route: string, body?: object) => {
    const res = await fetch(`${sim.url}${route}`, {
      method,
      ...(body ? { headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) } : {}),
    });
    if (!res.ok) throw new Error(`simulator: ${method} ${route} answered ${res.status}: ${await res.text()}`);
    return res.json() as Promise<unknown>;
  };
  try {
    // One customer's campaign: its key and address must not be what limits it.
    const env = {
      ...sim.carrierEnv,
      HANDSET_API_RATE_LIMIT: '1000000',
      HANDSET_ADDRESS_RATE_LIMIT: '1000000',
      HANDSET_DISPATCH: run.dispatch,
    };
    for (const role of ['ingest', 'api', 'worker'] as const) roles.push(await b.start(role, env));
    const [ingest, api, worker] = roles as [RoleProcess, RoleProcess, RoleProcess];
    await control('PUT', '/webhook_url', { url: `${ingest.url}/webhooks/telnyx` });
    const { receiver, apiKey } = await b.freshCustomer('bulk');
    // Numbers of this run alone: an earlier run's customer still holds its own.
    const base = 1000 + bulkRuns++ * 100;
    const from = Array.from({ length: run.numbers }, (_, i) => `+1312555${String(base + i).padStart(4, '0')}`);
    for (const number of from) {
      const added = await createClient({ apiKey, baseUrl: api.url! }).POST('/v1/phone_numbers', {
        body: { number, ...(run.mps ? { mps: run.mps } : {}) },
      });
      if (!added.data) throw new Error(`bulk: could not add ${number}: ${JSON.stringify(added.error)}`);
    }
    const other = await b.freshCustomer('bulk-bystander');
    const bystander = { apiKey: other.apiKey, from: `+1312555${String(base + 99).padStart(4, '0')}` };
    const theirs = await createClient({ apiKey: bystander.apiKey, baseUrl: api.url! }).POST('/v1/phone_numbers', {
      body: { number: bystander.from },
    });
    if (!theirs.data) throw new Error(`bulk: could not add ${bystander.from}: ${JSON.stringify(theirs.error)}`);
    const watch = watchCpu({ ingest: ingest.pid, api: api.pid, worker: worker.pid }, b.postmaster);
    const carrierWatch = watchCpu({ sim: sim.pid }, null);
    const r = await runBulkSend({
      pool: b.db.pool,
      apiUrl: api.url!,
      apiKey,
      from,
      receiver,
      messages: run.messages,
      perRequest: run.perRequest,
      // 32 single creates in flight, or a few batches: either keeps the API busy without queueing at it.
      concurrency: run.perRequest > 1 ? 4 : 32,
      stallMs: 120_000,
      bystander,
      carrierCounts: async () => ((await control('GET', '/state')) as { counts: CarrierCounts }).counts,
    });
    const result = { ...r, cpu: watch.stop(), carrierCores: carrierWatch.stop().roles['sim'] ?? null };
    const tag = `bulk (${run.label})`;
    if (r.extraEvents !== 0)
      b.report.notes.push(`${tag}: ${r.extraEvents} customer events beyond one sent and one delivered per message`);
    if (r.refusedCreates) b.report.notes.push(`${tag}: ${r.refusedCreates} creates refused`);
    b.report.notes.push(
      `${tag}: PostgreSQL's busy backends (samples): ${r.waits.map(([w, n]) => `${w} ${n}`).join(', ')}`,
    );
    log(
      `  ${run.label}: ${r.messages} messages in ${r.seconds.toFixed(1)} s: ${Math.round(r.completedPerSecond)} completed/s ` +
        `(created ${Math.round(r.createdPerSecond)}/s), end to end p50 ${r.steps.endToEnd.p50.toFixed(0)} ms p99 ${r.steps.endToEnd.p99.toFixed(0)} ms`,
    );
    return result;
  } finally {
    await b.stop(...roles, sim);
  }
}

async function pipelinePhase(b: Bench, withPipeline: boolean, withDelivery: boolean): Promise<void> {
  const floor = await measureQueueFloor({
    databaseUrl: b.db.url,
    concurrency: WORKER_CONCURRENCY,
    pickupSeconds: Math.max(2, b.opts.duration / 2),
    pickupRate: 50,
    burnJobs: b.opts.deliveries,
  });
  b.report.queue = floor;
  log(
    `  queue floor: wake-up p50 ${floor.pickup.p50.toFixed(2)} ms p99 ${floor.pickup.p99.toFixed(2)} ms, burn-down ${Math.round(floor.burnDown)} jobs/s`,
  );

  await settleCarrierEvents(b.db.pool);
  const [ingest, worker] = [await b.start('ingest'), await b.start('worker')];
  try {
    if (withPipeline) {
      // The sustained rate first: it sets the paced run's rate, which must stay well under
      // capacity to measure latency rather than queueing.
      const sustained = await b.pipeline(ingest, worker);
      log(
        `  pipeline sustained: ${Math.round(sustained.receiptsPerSecond)} receipts/s, p50 ${sustained.latency.p50.toFixed(1)} ms p99 ${sustained.latency.p99.toFixed(1)} ms`,
      );
      b.pacedRate = Math.max(5, Math.min(b.opts.pipelineRate, Math.floor(sustained.messagesPerSecond / 3)));
      if (b.pacedRate < b.opts.pipelineRate) {
        b.report.notes.push(
          `pipeline paced at ${b.pacedRate} msg/s: a third of the sustained rate (${Math.round(sustained.messagesPerSecond)} msg/s), below the default ${b.opts.pipelineRate}`,
        );
      }
      const paced = await b.pipeline(ingest, worker, b.pacedRate);
      log(
        `  pipeline paced ${b.pacedRate} msg/s: p50 ${paced.latency.p50.toFixed(1)} ms p99 ${paced.latency.p99.toFixed(1)} ms`,
      );
      // Half the sustained rate: a busy day's latency, which must not be a queue's.
      const halfRate = Math.max(5, Math.round(sustained.messagesPerSecond / 2));
      const half = await b.pipeline(ingest, worker, halfRate);
      log(
        `  pipeline paced at half the sustained rate (${halfRate} msg/s): p50 ${half.latency.p50.toFixed(1)} ms p99 ${half.latency.p99.toFixed(1)} ms`,
      );
      b.report.pipeline = { paced, sustained, half };
      const neighbour = await noisyNeighbour(b, ingest, worker);
      log(
        `  with ${neighbour.hangingEndpoints} hanging endpoints of another account: p50 ${neighbour.latency.p50.toFixed(1)} ms p99 ${neighbour.latency.p99.toFixed(1)} ms`,
      );
      b.report.pipeline.neighbour = neighbour;
    }
    if (withDelivery) {
      for (const [endpoints, events] of [
        [1, Math.ceil(b.opts.deliveries / 4)],
        [8, b.opts.deliveries],
      ] as const) {
        const { receiver, customers } = await b.customersAndReceiver(endpoints);
        const d = await runDelivery({
          pool: b.db.pool,
          receiver,
          customers,
          events,
          watchCpu: () => watchCpu({ worker: worker.pid }, b.postmaster),
        });
        b.report.delivery.push(d);
        if (d.rejected) b.report.notes.push(`delivery: ${d.rejected} webhooks failed verification`);
        log(`  delivery, ${endpoints} endpoint${endpoints > 1 ? 's' : ''}: ${Math.round(d.rate)} events/s`);
      }
    }
  } finally {
    await b.stop(ingest, worker);
  }
}

/**
 * The paced pipeline again while another account has 12 endpoints that accept
 * connections and never answer, each with deliveries waiting: its figure beside
 * the paced one from the same run is what fairness costs (or fails to protect).
 */
async function noisyNeighbour(b: Bench, ingest: RoleProcess, worker: RoleProcess) {
  const ENDPOINTS = 12;
  const hanging = new Set<ServerResponse>();
  const server = createServer((req, res) => {
    req.resume();
    hanging.add(res);
  });
  let attempts = 0;
  server.on('request', () => attempts++);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const keys = keyring([Buffer.from(b.secretKeyBase64, 'base64')]);
  const noisy = await createCustomer(b.db.pool, keys, `${url}/0`);
  await withTx(b.db.pool, async (tx) => {
    for (let i = 1; i < ENDPOINTS; i++) {
      const id = newId('ep');
      await endpointInsert(tx, {
        id,
        accountId: noisy.accountId,
        url: `${url}/${i}`,
        description: null,
        eventTypes: [],
        cap: ENDPOINTS,
      });
      await secretAdd(tx, id, keys.seal(id, newEndpointSecret()));
    }
    for (let i = 0; i < 20; i++) {
      await emit(tx, {
        accountId: noisy.accountId,
        tenantId: null,
        type: 'message.delivered',
        subjectId: `msg_noise${i}`,
        data: { id: `msg_noise${i}` },
        occurredAt: new Date(),
      });
    }
  });
  try {
    // Measured once the noise is steady: its attempts hang, and each of its deliveries
    // has had its first turn (the fan-out's burst of jobs and relay claims is behind it).
    const deadline = Date.now() + 30_000;
    const firstTurns = async () =>
      (
        await b.db.pool.query<{ n: number }>(
          `SELECT ((SELECT count(*) FROM graphile_worker.jobs
                     WHERE task_identifier = 'delivery.attempt' AND queue_name IS NULL AND priority = 0)
                 + (SELECT count(*) FROM webhook_deliveries WHERE relay_after <= now() AND status = 'pending'))::int
                  AS n`,
        )
      ).rows[0]!.n;
    while ((attempts < 4 || (await firstTurns()) > 0) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
    }
    const r = await b.pipeline(ingest, worker, b.pacedRate);
    return { ...r, hangingEndpoints: ENDPOINTS, hangingAttempts: attempts };
  } finally {
    // The noise stops: its endpoints go, their connections close, their waiting deliveries end.
    await b.db.pool.query('UPDATE webhook_endpoints SET deleted_at = now(), enabled = false WHERE account_id = $1', [
      noisy.accountId,
    ]);
    for (const res of hanging) res.destroy();
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  }
}

async function growthPhase(b: Bench): Promise<void> {
  await resetIngestTables(b.db.pool);
  for (const target of [b.opts.growthSmall, b.opts.growthLarge]) {
    const fill = await fillCarrierEvents(
      b.db.pool,
      target,
      b.factory.body('00000000-0000-4000-8000-000000000000', '00000000-0000-4000-8000-000000000001'),
    );
    const sizes = await carrierEventSizes(b.db.pool);
    log(
      `  ${target.toLocaleString('en-US')} stored (+${fill.added} in ${fill.seconds.toFixed(1)} s; table ${sizes.tableMiB} MiB, indexes ${sizes.indexesMiB} MiB)`,
    );
    // Each measurement's own rows are removed afterwards, so every one sees `target` rows.
    const marker = await b.db.pool.query<{ t: Date }>('SELECT now() AS t');
    const trim = async () => {
      await settleCarrierEvents(b.db.pool);
      await b.db.pool.query('DELETE FROM carrier_events WHERE created_at > $1', [marker.rows[0]!.t]);
      await b.db.pool.query('VACUUM carrier_events');
      await checkpoint(b.db.pool);
    };

    const A = await measureStatement(b, 'A', 16);
    await trim();
    const ingest = await b.start('ingest');
    let run: Measured;
    try {
      run = await growthIngest(b, ingest, 16, A.rate);
    } finally {
      await b.stop(ingest);
    }
    await trim();
    log(`    A ${fmt(A)}\n    ingest ${fmt(run)}`);

    const [ing, worker] = [await b.start('ingest'), await b.start('worker')];
    let pipeline: Awaited<ReturnType<typeof b.pipeline>>;
    try {
      pipeline = await b.pipeline(ing, worker, b.pacedRate);
    } finally {
      await b.stop(ing, worker);
    }
    await trim();
    log(`    pipeline p50 ${pipeline.latency.p50.toFixed(1)} ms p99 ${pipeline.latency.p99.toFixed(1)} ms`);
    const point: GrowthPoint = { stored: target, fillSeconds: fill.seconds, ...sizes, ingest: run, A, pipeline };
    b.report.growth.push(point);
  }
  await resetIngestTables(b.db.pool);
}

/** A baseline statement with the CPU split of its measured part (warm-up excluded). */
async function measureStatement(
  b: Bench,
  s: Statement,
  c: number,
  replay?: string[],
  writers?: number,
): Promise<Measured> {
  let watch: CpuWatch | null = null;
  let cpu: CpuSplit | null = null;
  const r = await runStatement({
    databaseUrl: b.db.url,
    statement: s,
    concurrency: c,
    seconds: b.opts.duration,
    warmup: Math.min(1, b.opts.warmup), // connections are open and statements prepared before it
    body: (id) => b.factory.body(id, id),
    ...(replay ? { replay } : {}),
    ...(writers ? { writers } : {}),
    onStart: () => (watch = watchCpu({}, b.postmaster)),
    onEnd: () => (cpu = watch!.stop()),
  });
  return { ...r, cpu: cpu! };
}

async function growthIngest(b: Bench, ingest: RoleProcess, c: number, expectedRate: number): Promise<Measured> {
  const { duration, warmup } = b.opts;
  const webhooks = b.factory.unique(Math.ceil(expectedRate * 1.6 * (duration + warmup)) + 500);
  let from = 0;
  if (warmup > 0) from = (await hammer({ urls: [ingest.url!], connections: c, seconds: warmup, webhooks })).used;
  const watch = watchCpu({ ingest: ingest.pid }, b.postmaster);
  const r = await hammer({ urls: [ingest.url!], connections: c, seconds: duration, webhooks, from });
  return { ...r, cpu: watch.stop() };
}

async function scalePhase(b: Bench): Promise<void> {
  const c = 64;
  const a64 = b.report.ingest.find((p) => p.concurrency === c);
  // HTTP-bound: budget from what one process did at c=64 (pre-signing 75 µs a piece is not free).
  const expected = Math.max((a64?.ingest.rate ?? 0) * 1.5, 1500);
  for (const k of b.opts.processes) {
    const ps: RoleProcess[] = [];
    try {
      for (let i = 0; i < k; i++) ps.push(await b.start('ingest'));
      const { sent: _sent, ...r } = await b.ingest(ps, c, expected);
      log(`  ${k} process${k > 1 ? 'es' : ''}: ${fmt(r)}`);
      await b.stop(...ps);
      // The same number of independent writers driven over pg (one of them is baseline A at c=64).
      const A = k === 1 && a64 ? a64.A : await b.statement('A', c, undefined, k);
      if (k > 1) log(`  ${k} writers over pg: ${fmt(A)}`);
      b.report.scale.push({ processes: k, result: r, A });
    } finally {
      await b.stop(...ps);
    }
  }
  await resetIngestTables(b.db.pool);
}

async function main(): Promise<void> {
  const opts = parseOptions(process.argv.slice(2));
  const started = Date.now();
  const silent = createLogger('warn');
  log(
    `handset bench: starting PostgreSQL (${process.env['DATABASE_URL'] ? 'a fresh database on DATABASE_URL' : 'embedded'})`,
  );
  const db = await openBenchDatabase(silent);
  const report: BenchReport = {
    startedAt: new Date(started).toISOString(),
    seconds: 0,
    command: `npm run bench${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}`,
    machine: await machineInfo(db.pool, db.kind),
    options: opts,
    ingest: [],
    delivery: [],
    growth: [],
    scale: [],
    targets: [],
    notes: [],
  };
  const bench = new Bench(opts, db, await findPostmaster(db.pool), report);
  // Ctrl-C: stop the roles and the database we started, then go.
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      log(`${signal}: stopping`);
      void Promise.allSettled([bench.stopAll(), bench.closeReceiver()])
        .then(() => db.close())
        .finally(() => process.exit(130));
    });
  }
  const has = (p: Phase) => opts.phases.includes(p);
  let failure: unknown = null;
  /** Runs that stopped early without stopping the bench: noted, and the bench exits 1. */
  const stoppedEarly: string[] = [];
  try {
    if (has('ingest')) {
      log('1, 2. ingest: unique events with baselines A and B, duplicates, half-peak latency');
      await ingestPhase(bench);
    }
    if (has('pipeline') || has('delivery')) {
      log('3, 4. queue floor, pipeline and delivery (worker role running)');
      await pipelinePhase(bench, has('pipeline'), has('delivery'));
    }
    if (has('bulk')) {
      log(
        `bulk send: ${opts.bulkMessages.toLocaleString('en-US')} messages, API → carrier → receipts (50% duplicates) → customer`,
      );
      // The old path first (one POST /v1/messages and one job per message), as the baseline of the same
      // run; then the new one: batch creates and the batched dispatcher.
      const baseline = await bulkPhase(bench, {
        label: 'one job per message',
        dispatch: 'jobs',
        perRequest: 1,
        messages: opts.bulkBaselineMessages,
        numbers: 1,
      });
      const batched = await bulkPhase(bench, {
        label: 'batched',
        dispatch: 'batched',
        perRequest: BULK_PER_REQUEST,
        messages: opts.bulkMessages,
        numbers: 1,
      });
      bench.report.bulk = { ...batched, baseline };
      // A per-number rate: mps 50 on each of 4 numbers, so 200 a second at most. A run that
      // stops early keeps the two above and goes on to the next phases; the bench still fails.
      if (opts.bulkPacedMessages > 0) {
        try {
          bench.report.bulk.paced = await bulkPhase(bench, {
            label: `mps ${PACED_MPS} × ${PACED_NUMBERS} numbers`,
            dispatch: 'batched',
            perRequest: BULK_PER_REQUEST,
            messages: opts.bulkPacedMessages,
            numbers: PACED_NUMBERS,
            mps: PACED_MPS,
          });
        } catch (err) {
          stoppedEarly.push(`bulk (mps ${PACED_MPS} × ${PACED_NUMBERS} numbers): ${(err as Error).message}`);
          log(`  the paced run stopped early: ${(err as Error).message}`);
        }
      }
    }
    if (has('growth')) {
      log(
        `5. cost growth: ${opts.growthSmall.toLocaleString('en-US')} and ${opts.growthLarge.toLocaleString('en-US')} stored carrier events`,
      );
      await growthPhase(bench);
    }
    if (has('scale')) {
      log('6. scale-out: 1, 2 and 4 ingest processes');
      await scalePhase(bench);
    }
    if (has('inbox')) {
      log('7. @handset/inbox: added latency at 100/s, events/s at concurrency 32, beside the same handler without it');
      report.inbox = await inboxPhase(db, opts, log);
    }
  } catch (err) {
    failure = err;
  } finally {
    await bench.stopAll();
    await bench.closeReceiver();
    await db.close();
  }

  report.seconds = (Date.now() - started) / 1000;
  report.targets = [...evaluateTargets(report), ...inboxTargets(report.inbox)];
  for (const s of stoppedEarly) report.notes.push(`a run stopped early: ${s}`);
  if (failure) report.notes.push(`the run stopped early: ${(failure as Error).message.split('\n')[0]}`);
  await mkdir(opts.outDir, { recursive: true });
  const stamp = report.startedAt.replace(/[:.]/g, '-');
  const json = JSON.stringify(report, null, 2);
  await writeFile(path.join(opts.outDir, `bench-${stamp}.json`), json);
  await writeFile(path.join(opts.outDir, 'latest.json'), json);
  process.stdout.write(
    `\n${renderTable(report)}\n${report.inbox ? `\n${inboxTable(report.inbox)}\n` : ''}\nresults: ${path.join(opts.outDir, `bench-${stamp}.json`)}\n`,
  );
  if (failure) {
    process.stderr.write(`bench failed: ${(failure as Error).stack ?? String(failure)}\n`);
    process.exit(1);
  }
  if (stoppedEarly.length > 0) {
    process.stderr.write(`bench failed: ${stoppedEarly.length} run(s) stopped early (see the notes)\n`);
    process.exit(1);
  }
  process.exit(0);
}

await main();
