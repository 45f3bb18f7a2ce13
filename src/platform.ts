// Wires the roles of one Handset process from a Config: the ingest server, the
// customer API and the worker (job runner). Each role gets its own connection
// pool sized for its work. `handset serve --roles …` and `handset dev` both start
// here; any role can run alone, in any number of replicas.

import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import pg from 'pg';
import type { CarrierAdapter } from './carrier/carrier.js';
import { carriers as configuredCarriers, defaultPublicIngestUrl, type Carriers } from './carrier/registry.js';
import { DEFAULT_ED25519_ENGINE } from './carrier/telnyx/ed25519.js';
import { processCarrierEventTask, type HandlerRegistry, type ProcessDeps } from './carrier/process.js';
import { RELAY_LOOPS, startRelay, type Relay } from './carrier/relay.js';
import { ConfigError, loadConfig, type Config, type Role } from './config.js';
import { untilAvailable } from './db/errors.js';
import { createPool } from './db/pool.js';
import { migrate } from './db/migrate.js';
import { apiKeyRoutes, tenantRoutes } from './accounts/routes.js';
import { buildApiServer, type ApiRoutes } from './api/server.js';
import { Capacity } from './delivery/capacity.js';
import { type DeliveryDeps, deliveryTask } from './delivery/deliver.js';
import { startDeliveryRelay } from './delivery/relay.js';
import { SuccessLog } from './delivery/successes.js';
import { keyring, newSecretKey } from './delivery/keyring.js';
import { recoverTask } from './delivery/recover.js';
import { sealLegacySecrets } from './delivery/seal.js';
import { deliveryRoutes, endpointEvents } from './delivery/routes.js';
import { buildIngestServer } from './ingest/server.js';
import { usageRoutes } from './billing/routes.js';
import { commandTask, connectTask, dialTask } from './calls/commands.js';
import { callHandlers } from './calls/handlers.js';
import { callEvents, callRoutes } from './calls/routes.js';
import { maintenanceTask, MAINTENANCE_CRONTAB } from './maintenance.js';
import { dispatchTask } from './messages/dispatch.js';
import { DISPATCH_BATCH, startDispatcher } from './messages/dispatcher.js';
import { messageHandlers } from './messages/receipts.js';
import { messageEvents, messageRoutes } from './messages/routes.js';
import { numberRoutes } from './numbers/routes.js';
import { carrierRoutes } from './carrier/routes.js';
import { optOutEvents, optOutRoutes } from './optouts/routes.js';
import { fetchTask, recordTask, transcribeTask } from './recordings/jobs.js';
import { recordingHandlers } from './recordings/recordings.js';
import { recordingEvents, recordingRoutes } from './recordings/routes.js';
import { postgresAudioStore } from './recordings/storage.js';
import { transcriberOptions } from './recordings/transcriber.js';
import type { EventSchemas } from './outbox/outbox.sql.js';
import { eventRoutes } from './outbox/routes.js';
import { DELIVERY_TASKS } from './jobs/keys.js';
import { retryPolicies } from './jobs/retry.js';
import { startJobRunner, type JobRunner, type TaskRegistry } from './jobs/runner.js';
import { boundsRecord } from './reconcile/bounds.sql.js';
import { lookupTask, reconcileTask, scheduleReconcile, type ReconcileDeps } from './reconcile/reconcile.js';
import { withTx } from './db/tx.js';
import { createLogger, type Logger } from './telemetry/log.js';
import { Metrics } from './telemetry/metrics.js';

/** Every customer event type's `data` schema, from the domains that emit them. */
export const EVENT_SCHEMAS: EventSchemas = {
  ...messageEvents,
  ...callEvents,
  ...recordingEvents,
  ...optOutEvents,
  ...endpointEvents,
};

/** The customer API's routes, every domain's: what the api role serves and the OpenAPI document describes. */
export const API_ROUTES: readonly ApiRoutes[] = [
  tenantRoutes,
  apiKeyRoutes,
  numberRoutes,
  carrierRoutes,
  messageRoutes,
  optOutRoutes,
  callRoutes,
  recordingRoutes(postgresAudioStore),
  usageRoutes,
  deliveryRoutes,
  eventRoutes,
];

/**
 * The OpenAPI document the api role serves at /openapi.json, built from the same
 * routes without a database (a pool that is never used, no key listener):
 * `handset openapi` prints it and the typed client (src/client) is generated from it.
 */
export async function openApiDocument(): Promise<Record<string, unknown>> {
  const config = loadConfig({}, 'dev');
  const app = await buildApiServer({
    pool: new pg.Pool(),
    config,
    carriers: configuredCarriers(config),
    keys: keyring([Buffer.from(newSecretKey(), 'base64')]),
    events: EVENT_SCHEMAS,
    log: createLogger('silent'),
    metrics: new Metrics({ defaultMetrics: false }),
    routes: [...API_ROUTES],
    describeOnly: true,
  });
  try {
    return (await app.inject({ method: 'GET', url: '/openapi.json' })).json();
  } finally {
    await app.close();
  }
}

/**
 * Delivery jobs (retries, lanes, redeliveries) that run at once in a worker process,
 * and what its delivery pool is sized for: three connections each (the job's
 * transaction, graphile-worker's fetch and completion) and three more. First
 * attempts are the relay's, up to HANDSET_DELIVERY_CONCURRENCY of them, and hold no
 * connection while in flight, so neither grows with that setting past this.
 */
const DELIVERY_JOBS = 10;

/** How long a keep-alive connection has been idle before a refusal at the connection cap closes it. */
const STALE_IDLE_MS = 5_000;

export interface PlatformOptions {
  config: Config;
  databaseUrl: string;
  roles: readonly Role[];
  log: Logger;
  /** Carrier event handlers; defaults to every domain's. Tests may pass their own. */
  handlers?: HandlerRegistry;
  /** Extra job tasks (dispatch, dial…). */
  tasks?: TaskRegistry;
  /** Extra API routes (messages, calls…). */
  routes?: ApiRoutes[];
  /** Carriers besides the configured ones (a test's own adapter). */
  carriers?: readonly CarrierAdapter[];
}

export interface Platform {
  ingestUrl: string | null;
  apiUrl: string | null;
  /** The worker role's runners: carrier events and commands, and customer deliveries apart. */
  runners: JobRunner[];
  /** The worker role's relays: carrier events, and deliveries' first attempts. */
  relays: Relay[];
  metrics: Metrics;
  /** Graceful: stop taking work, finish in-flight requests and jobs, close the pools. */
  stop(): Promise<void>;
}

/** Ingest needs a carrier it can verify webhooks from, the API and the worker one they can talk to. */
export function checkRoleConfig(config: Config, all: Carriers, roles: readonly Role[]): void {
  if ((roles.includes('api') || roles.includes('worker')) && !config.secretKeys) {
    throw new ConfigError(
      'HANDSET_SECRET_KEY',
      'is required by the api and worker roles: base64 of 32 random bytes (openssl rand -base64 32)',
    );
  }
  const first = [...all.values()][0];
  if (!first) throw new Error('no carrier is configured');
  if (roles.includes('ingest') && ![...all.values()].some((a) => a.verify)) {
    throw new ConfigError(first.settings.verify, 'is required by the ingest role');
  }
  // The API asks the carrier whether a number being claimed is in the account; the worker sends and dials.
  if ((roles.includes('api') || roles.includes('worker')) && ![...all.values()].some((a) => a.client)) {
    throw new ConfigError(first.settings.client, 'is required by the api and worker roles');
  }
}

export async function startPlatform(opts: PlatformOptions): Promise<Platform> {
  const { config, log, roles } = opts;
  // Where the carriers reach ingest: as configured, else this process's own ingest once it listens.
  let publicIngestUrl = defaultPublicIngestUrl(config);
  const carriers = configuredCarriers(config, opts.carriers, () => publicIngestUrl);
  checkRoleConfig(config, carriers, roles);
  const keys = config.secretKeys ? keyring(config.secretKeys) : null;
  const metrics = new Metrics({ scrapeToken: config.metricsToken });
  const pools: pg.Pool[] = [];
  const servers: FastifyInstance[] = [];
  const runners: JobRunner[] = [];
  const relays: Relay[] = [];
  /** A pool for one role's work, with that role's statement and lock timeouts. */
  const pool = (role: Role, max: number, name: string = role, pipeline = false) => {
    const { statementMs, lockMs } = config.databaseTimeouts[role];
    const p = createPool(opts.databaseUrl, {
      max,
      applicationName: `handset-${name}`,
      log,
      statementTimeoutMs: statementMs,
      lockTimeoutMs: lockMs,
      pipeline,
    });
    pools.push(p);
    return p;
  };
  // Past the cap a new connection is closed as soon as it is accepted: it costs
  // no request parsing and no body, and the carrier retries what got no answer.
  // Keep-alive connections idle for STALE_IDLE_MS are closed then too, so the cap
  // is held by senders, not by a client's leftovers. Not those used a moment ago:
  // their sender may be writing its next request on one at that very moment, and a
  // request on a connection closing under it is a failed delivery, not a refusal.
  let lastDropWarning = 0;
  const capConnections = (app: FastifyInstance, role: 'ingest' | 'api') => {
    app.server.maxConnections = config.maxConnections[role];
    // Connections between requests, since when (none while a request is in flight).
    const idleSince = new Map<Socket, number>();
    app.server.on('connection', (socket: Socket) => {
      idleSince.set(socket, Date.now());
      socket.once('close', () => idleSince.delete(socket));
    });
    app.server.on('request', (req: IncomingMessage, res: ServerResponse) => {
      const socket = req.socket;
      idleSince.delete(socket);
      res.once('finish', () => {
        if (!socket.destroyed) idleSince.set(socket, Date.now());
      });
    });
    app.server.on('drop', () => {
      metrics.connectionsRefused.inc({ role });
      const now = Date.now();
      for (const [socket, since] of idleSince) if (now - since >= STALE_IDLE_MS) socket.destroy();
      if (Date.now() - lastDropWarning > 10_000) {
        lastDropWarning = Date.now();
        log.warn({ role, max: config.maxConnections[role] }, 'connection cap reached: new connections are refused');
      }
    });
  };

  const stop = async () => {
    await Promise.allSettled(servers.map((s) => s.close()));
    await Promise.all(relays.map((r) => r.stop()));
    await Promise.all(
      runners.map((r) => r.stop().catch((err: Error) => log.error({ err: err.message }, 'worker stop failed'))),
    );
    await Promise.allSettled(pools.map((p) => p.end()));
  };

  try {
    // No timeouts here: a replica waits on the migration lock for as long as another one migrates.
    const migrationPool = createPool(opts.databaseUrl, { max: 2, applicationName: 'handset-migrate', log });
    try {
      await untilAvailable(
        'apply migrations',
        () => migrate(migrationPool, log),
        (f, m) => log.warn(f, m),
      );
    } finally {
      await migrationPool.end();
    }

    let ingestUrl: string | null = null;
    if (roles.includes('ingest')) {
      // Group commit keeps one write in flight and /readyz takes one more; the rest is room to spare.
      const app = buildIngestServer({
        pool: pool('ingest', 4),
        carriers,
        log,
        metrics,
        bodyLimit: config.ingestBodyLimit,
        groupCommit: { maxQueue: config.ingestQueueLimit },
      });
      capConnections(app, 'ingest');
      servers.push(app);
      ingestUrl = await listen(app, config.host, config.ingestPort);
      if (!config.publicIngestUrl) publicIngestUrl = ingestUrl;
      log.info({ url: ingestUrl, ed25519: DEFAULT_ED25519_ENGINE }, 'ingest listening');
    }

    let apiUrl: string | null = null;
    if (roles.includes('api')) {
      const app = await buildApiServer({
        pool: pool('api', 10),
        config,
        carriers,
        keys: keys!,
        events: EVENT_SCHEMAS,
        log,
        metrics,
        routes: [...API_ROUTES, ...(opts.routes ?? [])],
      });
      capConnections(app, 'api');
      servers.push(app);
      apiUrl = await listen(app, config.host, config.apiPort);
      log.info({ url: apiUrl }, 'api listening');
    }

    if (servers.length > 0 && !config.metricsToken && !isLoopback(config.host)) {
      log.warn(
        { host: config.host },
        'HANDSET_METRICS_TOKEN is not set: GET /metrics answers anyone who can reach this address',
      );
    }

    if (roles.includes('worker')) {
      // Two runners, each with its pool and its own slots: carrier events, sends,
      // dials and call commands never wait behind a customer's slow endpoints.
      const workerPool = pool('worker', config.workerConcurrency * 2 + 4);
      // The carrier-event relay's own: each loop holds one during a batch (its listener has its own).
      // A batch is a long chain of short statements, sent pipelined (db/tx.ts); the runners' are not.
      const relayPool = pool('worker', RELAY_LOOPS, 'relay', true);
      // The delivery runner's jobs, the delivery relay's claims and lease renewals, and the attempts'
      // records (successes batched, one write at a time; a failure's transaction one each); the relay's
      // listener has its own. No connection is held during an attempt's HTTP exchange.
      const deliveryJobs = Math.min(config.deliveryConcurrency, DELIVERY_JOBS);
      const deliveryPool = pool('worker', deliveryJobs * 3 + 3, 'delivery');
      const policies = retryPolicies(config.workerStaleAfterMs);
      const reconcile: ReconcileDeps = {
        pool: workerPool,
        carriers,
        log,
        metrics,
        intervalMs: config.reconcileIntervalMs,
        afterMs: config.reconcileAfterMs,
        messageAfterMs: config.reconcileMessageAfterMs,
      };
      const capacity = new Capacity(config.deliveryPerAccount, config.deliveryConcurrency);
      const delivering = {
        pool: deliveryPool,
        log,
        metrics,
        keys: keys!,
        capacity,
        allowPrivate: config.allowPrivateWebhookUrls,
        timeoutMs: config.deliveryTimeoutMs,
      };
      const attempting: DeliveryDeps = {
        ...delivering,
        successes: new SuccessLog(deliveryPool),
        retrySchedule: config.deliveryRetrySchedule,
        disableAfter: config.endpointDisableAfter,
      };
      const processing: ProcessDeps = {
        pool: relayPool,
        carriers,
        handlers: opts.handlers ?? { ...messageHandlers, ...callHandlers, ...recordingHandlers },
        log,
        notReady: policies.notReady,
        failed: policies.processing,
      };
      const all: TaskRegistry = {
        'carrier_event.process': processCarrierEventTask(processing),
        'delivery.attempt': deliveryTask(attempting),
        'delivery.recover': recoverTask(delivering),
        'message.dispatch': dispatchTask({
          pool: workerPool,
          carriers,
          log,
          policy: policies.dispatch,
          health: config.carrierHealth,
        }),
        'call.dial': dialTask({ pool: workerPool, carriers, log, policies }),
        'call.command': commandTask({ pool: workerPool, carriers, log, policies }),
        'call.connect': connectTask({ pool: workerPool, carriers, log, policies }),
        ...((recording) => ({
          'call.record': recordTask(recording),
          'recording.fetch': fetchTask(recording),
          'recording.transcribe': transcribeTask(recording),
        }))({
          pool: workerPool,
          carriers,
          log,
          policies,
          store: postgresAudioStore,
          transcriber: transcriberOptions(config),
          transcriptionRetries: config.transcription.retrySchedule,
        }),
        reconcile: reconcileTask(reconcile),
        'reconcile.lookup': lookupTask(reconcile),
        maintenance: maintenanceTask({
          pool: workerPool,
          log,
          carrierEventRetentionMs: config.carrierEventRetentionMs,
        }),
        ...opts.tasks,
      };
      const isDelivery = (name: string) => (DELIVERY_TASKS as readonly string[]).includes(name);
      const pick = (want: boolean) =>
        Object.fromEntries(Object.entries(all).filter(([name]) => isDelivery(name) === want)) as TaskRegistry;
      const start = (what: string, p: pg.Pool, tasks: TaskRegistry, concurrency: number, crontab?: string) =>
        untilAvailable(
          `start the ${what} runner`,
          () =>
            startJobRunner({
              pool: p,
              log,
              metrics,
              tasks,
              concurrency,
              staleAfterMs: config.workerStaleAfterMs,
              ...(crontab ? { crontab } : {}),
            }),
          (f, m) => log.warn(f, m),
        );
      runners.push(await start('job', workerPool, pick(false), config.workerConcurrency, MAINTENANCE_CRONTAB));
      runners.push(await start('delivery', deliveryPool, pick(true), deliveryJobs));
      const deliveryRelay = startDeliveryRelay({
        deliver: attempting,
        log,
        concurrency: config.deliveryConcurrency,
        leaseMs: config.workerStaleAfterMs,
      });
      // The deliveries a batch fans out go to this worker's own delivery relay (delivery/handoff.ts).
      relays.push(deliveryRelay, startRelay({ process: processing, log, metrics, handOff: deliveryRelay }));
      if (config.dispatch === 'batched') {
        relays.push(
          startDispatcher({
            deps: {
              // Its own: sends in flight each ask the carrier's health and record, beside the claims.
              pool: pool('worker', Math.ceil(config.dispatchConcurrency / 2) + 4, 'dispatch'),
              carriers,
              log,
              policy: policies.dispatch,
              health: config.carrierHealth,
            },
            batchSize: DISPATCH_BATCH,
            concurrency: config.dispatchConcurrency,
            // Renewed while the dispatcher holds the message; a request starts only with a carrier
            // timeout and more of it left, so one that runs out has no request of ours under way.
            leaseMs: config.workerStaleAfterMs + config.carrierTimeoutMs * 2,
            carrierTimeoutMs: config.carrierTimeoutMs,
            handOff: deliveryRelay,
            recordPool: pool('worker', 2, 'dispatch-record', true),
          }),
        );
      }
      await untilAvailable(
        'seal webhook secrets stored in clear',
        () => sealLegacySecrets(workerPool, keys!, log),
        (f, m) => log.warn(f, m),
      );
      // The first pass one interval from now, unless one is scheduled already (another worker's); and
      // this worker's bounds recorded as in force, for `handset audit` to judge the database by.
      await untilAvailable(
        'schedule reconciliation',
        () =>
          withTx(workerPool, async (tx) => {
            await boundsRecord(tx, reconcile, new Date());
            await scheduleReconcile(tx, config.reconcileIntervalMs, new Date(), 'preserve_run_at');
          }),
        (f, m) => log.warn(f, m),
      );
      if (config.twilio && !config.publicIngestUrl && !roles.includes('ingest')) {
        log.warn(
          { publicIngestUrl },
          'HANDSET_PUBLIC_INGEST_URL is not set: Twilio status callbacks go to this default address',
        );
      }
      if (config.telnyx.apiKey && !config.telnyx.connectionId) {
        log.warn('TELNYX_CONNECTION_ID is not set: calls cannot be dialed');
      }
      log.info(
        {
          concurrency: config.workerConcurrency,
          deliveryConcurrency: config.deliveryConcurrency,
          deliveryPerAccount: config.deliveryPerAccount,
        },
        'worker running',
      );
    }

    return { ingestUrl, apiUrl, runners, relays, metrics, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^(::ffff:)?127\./.test(host);
}

async function listen(app: FastifyInstance, host: string, port: number): Promise<string> {
  await app.listen({ host, port });
  const addr = app.server.address() as AddressInfo;
  const shown = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host;
  return `http://${shown.includes(':') ? `[${shown}]` : shown}:${addr.port}`;
}
