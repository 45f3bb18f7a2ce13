// Prometheus metrics for one process, and who may read them. A fresh registry per
// process (not the prom-client global) so tests can run several servers side by side.

import { createHash, timingSafeEqual } from 'node:crypto';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { bearerCredential } from '../api/bearer.js';

export type IngestOutcome =
  | 'stored'
  | 'duplicate'
  | 'bad_signature'
  | 'bad_request'
  | 'too_large'
  | 'db_error'
  | 'queue_full'
  | 'held_bodies_full';
/** `lock_lost`: the run ended after a sweep had freed its job (its worker was silent past the bound). */
export type JobOutcome = 'completed' | 'failed' | 'lock_lost';
export type DeliveryOutcome = 'succeeded' | 'retrying' | 'failed' | 'skipped';

export class Metrics {
  readonly registry = new Registry();

  readonly ingestRequests = new Counter({
    name: 'handset_ingest_requests_total',
    help: 'Carrier webhook requests by outcome',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });

  readonly ingestDuration = new Histogram({
    name: 'handset_ingest_request_duration_seconds',
    help: 'Time to answer a carrier webhook, by outcome',
    labelNames: ['outcome'] as const,
    buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1],
    registers: [this.registry],
  });

  readonly ingestQueued: Gauge = new Gauge({
    name: 'handset_ingest_queued_webhooks',
    help: 'Verified webhooks waiting for the next write (beyond the one in flight)',
    registers: [this.registry],
    collect: () => this.ingestQueued.set(this.queued()),
  });
  private queued: () => number = () => 0;

  readonly ingestHeldBodyBytes: Gauge = new Gauge({
    name: 'handset_ingest_held_body_bytes',
    help: 'Bytes held by webhook bodies still arriving in pieces, against the held-body budget',
    registers: [this.registry],
    collect: () => this.ingestHeldBodyBytes.set(this.heldBodyBytes()),
  });
  private heldBodyBytes: () => number = () => 0;

  readonly jobs = new Counter({
    name: 'handset_jobs_total',
    help: 'Jobs run, by task and outcome',
    labelNames: ['task', 'outcome'] as const,
    registers: [this.registry],
  });

  readonly jobDuration = new Histogram({
    name: 'handset_job_duration_seconds',
    help: 'Job run time, by task',
    labelNames: ['task'] as const,
    buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 15],
    registers: [this.registry],
  });

  readonly carrierEvents = new Counter({
    name: 'handset_carrier_events_total',
    help: 'Carrier event runs by the relay, by outcome (applied, ignored, rejected: processed; waiting, failed: postponed)',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });

  readonly carrierEventBatchDuration = new Histogram({
    name: 'handset_carrier_event_batch_duration_seconds',
    help: 'Time from claiming a batch of carrier events to its commit',
    buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 5],
    registers: [this.registry],
  });

  readonly runnerRestarts = new Counter({
    name: 'handset_job_runner_restarts_total',
    help: 'Times the job runner stopped on its own (a database failure while recording a job) and was restarted',
    registers: [this.registry],
  });

  readonly reconcileLookups = new Counter({
    name: 'handset_reconcile_lookups_total',
    help: 'Carrier lookups made by reconciliation, by what was looked up and what came of it',
    labelNames: ['kind', 'outcome'] as const,
    registers: [this.registry],
  });

  readonly reconciledFacts = new Counter({
    name: 'handset_reconciled_facts_total',
    help: 'Carrier events stored from lookups (facts no webhook had told us yet)',
    registers: [this.registry],
  });

  readonly deliveries = new Counter({
    name: 'handset_webhook_deliveries_total',
    help: 'Customer webhook delivery attempts, by outcome',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });

  readonly deliveryDuration = new Histogram({
    name: 'handset_webhook_attempt_duration_seconds',
    help: 'Customer webhook attempt latency (request to response)',
    buckets: [0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 15],
    registers: [this.registry],
  });

  readonly deliveriesDeferred = new Counter({
    name: 'handset_webhook_attempts_deferred_total',
    help: 'Customer webhook attempts that waited because their account had its share of delivery capacity in flight',
    registers: [this.registry],
  });

  readonly endpointsDisabled = new Counter({
    name: 'handset_webhook_endpoints_disabled_total',
    help: 'Customer endpoints disabled automatically, by reason',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });

  readonly connectionsRefused = new Counter({
    name: 'handset_http_connections_refused_total',
    help: 'Connections closed as soon as accepted because the role had its maximum open, by role',
    labelNames: ['role'] as const,
    registers: [this.registry],
  });

  readonly apiKeyAuth = new Counter({
    name: 'handset_api_key_authentications_total',
    help: 'Well-formed API keys checked, by where the answer came from: the cache, or a database lookup',
    labelNames: ['via'] as const,
    registers: [this.registry],
  });

  readonly apiRateLimited = new Counter({
    name: 'handset_api_rate_limited_total',
    help: 'API requests answered 429 by this process, by the limit they met: per client address or per API key',
    labelNames: ['limit'] as const,
    registers: [this.registry],
  });

  readonly apiKeyListener = new Gauge({
    name: 'handset_api_key_listener_up',
    help: '1 while this API process listens for key revocations (its key cache is trusted), 0 otherwise',
    registers: [this.registry],
  });

  private readonly scrapeDigest: Buffer | null;

  constructor(opts: { defaultMetrics?: boolean; scrapeToken?: string | null } = {}) {
    if (opts.defaultMetrics !== false) collectDefaultMetrics({ register: this.registry });
    this.scrapeDigest = opts.scrapeToken ? digest(opts.scrapeToken) : null;
  }

  /** The ingest server tells where its queue length and its held body bytes are read. */
  observeIngest(read: { queued: () => number; heldBodyBytes: () => number }): void {
    this.queued = read.queued;
    this.heldBodyBytes = read.heldBodyBytes;
  }

  /** Whether a scrape carrying this Authorization header may read the metrics (any, when no token is set). */
  mayScrape(authorization: string | undefined): boolean {
    if (!this.scrapeDigest) return true;
    const given = bearerCredential(authorization) ?? '';
    // Digests of equal length, so the comparison takes the same time whatever was sent.
    return timingSafeEqual(digest(given), this.scrapeDigest);
  }
}

const digest = (text: string) => createHash('sha256').update(text, 'utf8').digest();
