// Wires the roles of one Handset process from a Config: the ingest server, the
// customer API and the worker (job runner). Each role gets its own connection
// pool sized for its work. `handset serve --roles …` and `handset dev` both start
// here; any role can run alone, in any number of replicas.

import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type pg from 'pg';
import type { CarrierAdapter } from './carrier/carrier.js';
import { processCarrierEventTask, type HandlerRegistry } from './carrier/process.js';
import { telnyxAdapter } from './carrier/telnyx/adapter.js';
import { ConfigError, type Config } from './config.js';
import { createPool } from './db/pool.js';
import { migrate } from './db/migrate.js';
import { buildIngestServer } from './ingest/server.js';
import { startJobRunner, type JobRunner, type TaskRegistry } from './jobs/runner.js';
import type { Logger } from './telemetry/log.js';
import { Metrics } from './telemetry/metrics.js';

export const ROLES = ['ingest', 'api', 'worker'] as const;
export type Role = (typeof ROLES)[number];

export interface PlatformOptions {
  config: Config;
  databaseUrl: string;
  roles: readonly Role[];
  log: Logger;
  /** Registered by later layers (messages, calls); tests may pass their own. */
  handlers?: HandlerRegistry;
  /** Extra job tasks (delivery, dispatch…). */
  tasks?: TaskRegistry;
}

export interface Platform {
  ingestUrl: string | null;
  apiUrl: string | null;
  runner: JobRunner | null;
  metrics: Metrics;
  /** Graceful: stop taking work, finish in-flight requests and jobs, close the pools. */
  stop(): Promise<void>;
}

export function checkRoleConfig(config: Config, roles: readonly Role[]): void {
  if (roles.includes('ingest') && !config.telnyx.publicKey) {
    throw new ConfigError('TELNYX_PUBLIC_KEY', 'is required by the ingest role');
  }
}

export async function startPlatform(opts: PlatformOptions): Promise<Platform> {
  const { config, log, roles } = opts;
  checkRoleConfig(config, roles);
  const metrics = new Metrics();
  const pools: pg.Pool[] = [];
  const servers: FastifyInstance[] = [];
  let runner: JobRunner | null = null;
  const pool = (name: string, max: number) => {
    const p = createPool(opts.databaseUrl, { max, applicationName: `handset-${name}`, log });
    pools.push(p);
    return p;
  };

  const stop = async () => {
    await Promise.allSettled(servers.map((s) => s.close()));
    if (runner) await runner.stop().catch((err: Error) => log.error({ err: err.message }, 'worker stop failed'));
    await Promise.allSettled(pools.map((p) => p.end()));
  };

  try {
    const migrationPool = pool('migrate', 2);
    await migrate(migrationPool, log);

    const adapters: CarrierAdapter[] = [
      telnyxAdapter({ publicKey: config.telnyx.publicKey, toleranceSeconds: config.webhookToleranceSeconds }),
    ];

    let ingestUrl: string | null = null;
    if (roles.includes('ingest')) {
      const app = buildIngestServer({ pool: pool('ingest', 20), adapters, log, metrics });
      servers.push(app);
      ingestUrl = await listen(app, config.host, config.ingestPort);
      log.info({ url: ingestUrl }, 'ingest listening');
    }

    if (roles.includes('worker')) {
      const workerPool = pool('worker', config.workerConcurrency * 2 + 4);
      const tasks: TaskRegistry = {
        'carrier_event.process': processCarrierEventTask({
          pool: workerPool,
          adapters: Object.fromEntries(adapters.map((a) => [a.name, a])),
          handlers: opts.handlers ?? {},
          log,
        }),
        ...opts.tasks,
      };
      runner = await startJobRunner({
        pool: workerPool,
        log,
        metrics,
        tasks,
        concurrency: config.workerConcurrency,
        staleAfterMs: config.workerStaleAfterMs,
      });
      log.info({ concurrency: config.workerConcurrency }, 'worker running');
    }

    return { ingestUrl, apiUrl: null, runner, metrics, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

async function listen(app: FastifyInstance, host: string, port: number): Promise<string> {
  await app.listen({ host, port });
  const addr = app.server.address() as AddressInfo;
  const shown = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host;
  return `http://${shown.includes(':') ? `[${shown}]` : shown}:${addr.port}`;
}
