// The ingest server receives carrier webhooks. It does exactly three things,
// fast: verify the signature, persist the raw event (idempotently, keyed by the
// carrier's event id), and enqueue a processing job in the same transaction. All
// routing and business logic happens in workers: this process must answer in
// milliseconds, because call-control latency is dead air in the caller's ear.
// Never a 2xx for an event that is not durably stored; a database failure is a
// 503 so the carrier retries. Webhooks arriving together share one transaction
// (group-commit.ts), which is what lets ingest scale past one commit at a time.

import type { IncomingMessage } from 'node:http';
import { TextDecoder } from 'node:util';
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type pg from 'pg';
import type { Carriers } from '../carrier/registry.js';
import { isBadInput } from '../db/errors.js';
import { registerOperationalRoutes } from '../telemetry/health.js';
import type { Logger } from '../telemetry/log.js';
import type { IngestOutcome, Metrics } from '../telemetry/metrics.js';
import { DEFAULT_HELD_BODY_BUDGET, HeldBodies, HeldBodiesFullError, readBody } from './body.js';
import { QueueFullError } from '../db/group-commit.js';
import { CarrierEventWriter, type GroupCommitOptions } from './group-commit.js';

/** Telnyx bodies are a few kilobytes; an MMS with many media URLs stays far below this. */
export const DEFAULT_BODY_LIMIT = 256 * 1024;

export interface IngestDeps {
  pool: pg.Pool;
  /** Each carrier this process can verify gets its own path, /webhooks/<name>. */
  carriers: Carriers;
  log: Logger;
  metrics: Metrics;
  /** Unix seconds; a parameter so tests can move time, not mock it. */
  nowSeconds?: () => number;
  /** How concurrent webhooks share a write (group-commit.ts); the defaults suit production. */
  groupCommit?: GroupCommitOptions;
  /**
   * Where verified events go; a CarrierEventWriter on `pool` unless given. The
   * bench's floor (baseline H) gives one that stores nothing, to weigh the rest.
   */
  events?: EventStore;
  /** A body larger than this, in bytes, is refused with 413. Defaults to DEFAULT_BODY_LIMIT. */
  bodyLimit?: number;
  /** Bytes that bodies still arriving may hold together (body.ts). Defaults to DEFAULT_HELD_BODY_BUDGET. */
  heldBodyBudget?: number;
}

/** What the server needs of a CarrierEventWriter. */
export type EventStore = Pick<CarrierEventWriter, 'store' | 'waiting'>;

const EMPTY = Buffer.alloc(0);
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

export function buildIngestServer(deps: IngestDeps): FastifyInstance {
  const { pool, log, metrics } = deps;
  const nowSeconds = deps.nowSeconds ?? (() => Math.floor(Date.now() / 1000));
  const bodyLimit = deps.bodyLimit ?? DEFAULT_BODY_LIMIT;
  const heldBodies = new HeldBodies(deps.heldBodyBudget ?? DEFAULT_HELD_BODY_BUDGET);
  const writer = deps.events ?? new CarrierEventWriter(pool, deps.groupCommit);
  metrics.observeIngest({ queued: () => writer.waiting, heldBodyBytes: () => heldBodies.held });
  const app = Fastify({
    bodyLimit,
    // A slow or stalled sender gets at most this long for its head, and for its
    // whole request; Node checks every second (its default is every 30 s).
    requestTimeout: 10_000,
    connectionTimeout: 15_000,
    keepAliveTimeout: 72_000,
    http: { headersTimeout: 5_000, connectionsCheckingInterval: 1_000 },
    maxRequestsPerSocket: 0,
    return503OnClosing: true,
  });

  // The body is opaque bytes until its signature checks out: a missing or
  // malformed content-type must not turn a webhook into a 415 before verification.
  app.addHook('onRequest', (req, _reply, done) => {
    req.headers['content-type'] = 'application/octet-stream';
    done();
  });

  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_req: FastifyRequest, payload: IncomingMessage) =>
    readBody(payload, bodyLimit, heldBodies),
  );

  const answer = (reply: FastifyReply, started: number, outcome: IngestOutcome, status: number, body: object) => {
    metrics.ingestRequests.inc({ outcome });
    metrics.ingestDuration.observe({ outcome }, (performance.now() - started) / 1000);
    return reply.code(status).send(body);
  };

  for (const adapter of deps.carriers.values()) {
    const verify = adapter.verify;
    if (!verify) continue;
    app.post(`/webhooks/${adapter.name}`, async (req, reply) => {
      const started = performance.now();
      const raw = Buffer.isBuffer(req.body) ? req.body : EMPTY;

      // 1. Verify over the raw bytes (and, for a carrier that signs it, the URL it called), before anything is stored.
      const now = nowSeconds();
      const failure = verify(raw, req.headers, now, req.url);
      if (failure) return answer(reply, started, 'bad_signature', 401, { error: failure });

      let text: string;
      let envelope: ReturnType<typeof adapter.envelope>;
      try {
        const decoded = adapter.storable
          ? adapter.storable(raw, { url: req.url, headers: req.headers, nowSeconds: now })
          : utf8.decode(raw);
        if (decoded === null) throw new Error('not a body of this carrier');
        text = storableJson(decoded);
        envelope = adapter.envelope(JSON.parse(text));
      } catch {
        return answer(reply, started, 'bad_request', 400, {
          error: 'malformed_body',
          detail: adapter.storable ? `not a ${adapter.name} webhook body` : 'body is not UTF-8 JSON',
        });
      }
      if (!envelope) {
        return answer(reply, started, 'bad_request', 400, {
          error: 'not_an_envelope',
          detail: `not a ${adapter.name} event: its id or type is missing`,
        });
      }
      const own = adapter.reply?.(envelope) ?? null;

      // 2 and 3. Persist once and enqueue, in one statement, shared with the webhooks arriving meanwhile.
      try {
        const result = await writer.store({
          carrier: adapter.name,
          carrierEventId: envelope.eventId,
          eventType: envelope.eventType,
          subject: envelope.subject,
          rawJson: text,
        });
        const outcome = result.stored ? 'stored' : 'duplicate';
        if (own) {
          metrics.ingestRequests.inc({ outcome });
          metrics.ingestDuration.observe({ outcome }, (performance.now() - started) / 1000);
          return reply.code(200).type(own.contentType).send(own.body);
        }
        return answer(reply, started, outcome, 200, { status: outcome });
      } catch (err) {
        if (err instanceof QueueFullError) {
          return answer(reply, started, 'queue_full', 503, { error: 'unavailable', detail: 'try again' });
        }
        if (isBadInput(err)) {
          return answer(reply, started, 'bad_request', 400, {
            error: 'unstorable_body',
            detail: 'the database refused the body',
          });
        }
        log.error({ err: (err as Error).message, carrier: adapter.name }, 'could not store carrier event');
        return answer(reply, started, 'db_error', 503, { error: 'unavailable', detail: 'try again' });
      }
    });
  }

  registerOperationalRoutes(app, { pool, metrics });

  app.setNotFoundHandler((_req, reply) => reply.code(404).send({ error: 'not_found' }));
  app.setErrorHandler((err: Error & { statusCode?: number; code?: string }, req, reply) => {
    // A refused body's connection is closed once the answer is out, not kept alive or
    // drained: the rest of a stalled body would otherwise keep the connection; Node's
    // own close after a `connection: close` answer waits a turn of the loop, in which
    // it reads (and drops) as much of the rest as has arrived; and reading it only to
    // drop it is what grows the C heap in a storm.
    const refuseBody = (status: number, body: object) => {
      reply.raw.once('finish', () => req.raw.socket.destroy());
      return reply.code(status).header('connection', 'close').send(body);
    };
    if (err.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
      metrics.ingestRequests.inc({ outcome: 'too_large' });
      return refuseBody(413, { error: 'too_large', detail: `body over ${bodyLimit} bytes` });
    }
    if (err instanceof HeldBodiesFullError) {
      metrics.ingestRequests.inc({ outcome: 'held_bodies_full' });
      return refuseBody(503, { error: 'unavailable', detail: 'try again' });
    }
    const status = err.statusCode && err.statusCode >= 400 && err.statusCode < 500 ? err.statusCode : 500;
    if (status === 500) log.error({ err: err.message }, 'ingest error');
    else metrics.ingestRequests.inc({ outcome: 'bad_request' });
    return reply.code(status).send({ error: status === 500 ? 'internal_error' : 'bad_request' });
  });
  return app;
}

// An escape (`\u`, not itself escaped by a backslash) of NUL, of a high surrogate
// with or without the low one after it, or of a lone low surrogate.
const UNSTORABLE_ESCAPE =
  /(?<!\\)((?:\\\\)*)\\u(?:0000|([dD][89abAB][0-9a-fA-F]{2})(\\u[dD][c-fC-F][0-9a-fA-F]{2})?|[dD][c-fC-F][0-9a-fA-F]{2})/g;

/**
 * jsonb cannot hold U+0000 or a lone UTF-16 surrogate (an SMS cut in the middle of
 * an emoji has one), and refusing an authentic webhook would lose it: the carrier
 * retries a 400 a few times, then gives up. Such an escape becomes U+FFFD; a
 * surrogate pair is kept. The signature was checked on the bytes as sent. Neither
 * can appear unescaped: the UTF-8 decoder already refused the body then.
 */
export function storableJson(text: string): string {
  if (!text.includes('\\u')) return text;
  return text.replace(
    UNSTORABLE_ESCAPE,
    (match, backslashes: string, high: string | undefined, low: string | undefined) =>
      high && low ? match : `${backslashes}\\ufffd`,
  );
}
