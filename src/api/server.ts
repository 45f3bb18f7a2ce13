// The customer REST API (the api role). Fastify with TypeBox schemas on every
// body and query (validated by Ajv, documented in the generated OpenAPI at
// /openapi.json and browsable at /docs), Bearer API keys on every /v1 route, and
// errors translated once into problem+json. Domain folders contribute their
// routes as ApiRoutes; this file only assembles them (and mounts the web
// console's files, src/console, which are not part of the API).

import type { IncomingMessage, ServerResponse } from 'node:http';
import swagger from '@fastify/swagger';
import rateLimit from '@fastify/rate-limit';
import type { Keyring } from '../delivery/keyring.js';
import { webhooksDocument } from '../outbox/catalogue.js';
import type { EventSchemas } from '../outbox/outbox.sql.js';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Fastify, {
  type FastifyBaseLogger,
  type FastifyInstance,
  type FastifyReply,
  type RawServerDefault,
} from 'fastify';
import type pg from 'pg';
import type { Principal } from '../accounts/accounts.js';
import { Authenticator } from '../accounts/auth.js';
import type { Carriers } from '../carrier/registry.js';
import type { Config } from '../config.js';
import { registerConsoleRoutes } from '../console/routes.js';
import { registerOperationalRoutes } from '../telemetry/health.js';
import type { Logger } from '../telemetry/log.js';
import type { Metrics } from '../telemetry/metrics.js';
import { bearerCredential } from './bearer.js';
import { clientOf, perReplica, retryAfterSeconds, WindowCounter } from './limits.js';
import { ERRORS_PAGE } from './codes.js';
import { API_TAGS, registerDocs } from './docs.js';
import { COMPONENT_NAME } from './fields.js';
import { PHONE_FORMAT } from '../numbers/numbers.js';
import { addFormats, DAY_OR_INSTANT, parseQueryIntegers, refuseIllFormedText } from './input.js';
import { hoistComponents, optionalWhenDefaulted, withStandardProblems } from './openapi.js';
import { apiErrorHandler, problem, sendProblem } from './problem.js';

export type ApiApp = FastifyInstance<
  RawServerDefault,
  IncomingMessage,
  ServerResponse<IncomingMessage>,
  FastifyBaseLogger,
  TypeBoxTypeProvider
>;

export interface ApiContext {
  pool: pg.Pool;
  config: Config;
  log: Logger;
  /** The carriers this deployment talks to; a number names one, its messages and calls go through it. */
  carriers: Carriers;
  /** Seals webhook signing secrets (HANDSET_SECRET_KEY). */
  keys: Keyring;
  /** This process's API key cache: a route that revokes or re-dates a key tells it after the commit. */
  apiKeys: Pick<Authenticator, 'changed'>;
}

/** A domain's routes, registered under /v1 behind authentication. */
export type ApiRoutes = (app: ApiApp, ctx: ApiContext) => void;

declare module 'fastify' {
  interface FastifyRequest {
    /** The authenticated caller; set on every /v1 request. */
    principal: Principal;
  }
}

export interface ApiDeps extends Omit<ApiContext, 'apiKeys'> {
  metrics: Metrics;
  routes: ApiRoutes[];
  /** Each customer event type's `data` schema, for the OpenAPI document's `webhooks`. */
  events?: EventSchemas;
  /** Built only to describe itself (`handset openapi`, the client's build): no key listener, nothing served. */
  describeOnly?: boolean;
}

/** Load balancers' and scrapers' routes: not counted against a client address's limit. */
const OPERATIONAL_PATHS = new Set(['/healthz', '/readyz', '/metrics']);

/**
 * Limits for slow or stalled clients: the head must arrive within headersTimeout,
 * the whole request within requestTimeout (Node checks every second, not every 30).
 */
export const SLOW_CLIENT_LIMITS = {
  requestTimeout: 30_000,
  connectionTimeout: 30_000,
  keepAliveTimeout: 72_000,
  http: { headersTimeout: 10_000, connectionsCheckingInterval: 1_000 },
} as const;

/** Answers a request Node could not even parse with a small problem+json, then closes. */
export function problemClientError(err: Error & { code?: string }, socket: import('node:net').Socket): void {
  if (!socket.writable) {
    socket.destroy();
    return;
  }
  const status = err.code === 'HPE_HEADER_OVERFLOW' ? 431 : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : 400;
  const body = JSON.stringify(
    problem(status, status === 431 ? 'headers_too_large' : status === 408 ? 'request_timeout' : 'malformed_request'),
  );
  const reason =
    status === 431 ? 'Request Header Fields Too Large' : status === 408 ? 'Request Timeout' : 'Bad Request';
  socket.end(
    `HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/problem+json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}

export async function buildApiServer(deps: ApiDeps): Promise<FastifyInstance> {
  const app = Fastify({
    bodyLimit: 256 * 1024,
    // X-Forwarded-For is believed only from these (req.ip: the last address in it that is not one of them).
    trustProxy: deps.config.trustedProxies.length > 0 ? deps.config.trustedProxies : false,
    ...SLOW_CLIENT_LIMITS,
    return503OnClosing: true,
    // Router refusals (a broken percent-escape in the path) answer like every other error.
    frameworkErrors: (err, _req, reply) => sendProblem(reply, problem(400, 'invalid_path', err.message)),
    // Protocol-level refusals (431 header flood, an unparseable head) too.
    clientErrorHandler: problemClientError,
    // The response serializer's own Ajv (it resolves anyOf) reads schemas too: it needs to know our formats' names.
    serializerOpts: { ajv: { formats: { [PHONE_FORMAT]: true, [DAY_OR_INSTANT]: true } } },
    ajv: {
      customOptions: {
        removeAdditional: false, // unknown fields are an error, not silently dropped
        coerceTypes: false, // a string is not a number, a number not a string, a value not a list (input.ts)
        useDefaults: true,
        allErrors: false,
        verbose: true, // errors carry their schema, so x-code can name the error
        keywords: ['x-code', COMPONENT_NAME],
      },
      // After ajv-formats (which the compiler adds last among plugins), so these win.
      onCreate: addFormats,
    } as object,
  }).withTypeProvider<TypeBoxTypeProvider>();

  app.setErrorHandler(apiErrorHandler(deps.log));

  // Limits before work (limits.ts): a client address over its share is refused here,
  // before a key is even hashed. Health checks and scrapes are not counted.
  const { config } = deps;
  const byAddress = new WindowCounter(perReplica(config.addressRateLimit, config.apiReplicas));
  const byKey = new WindowCounter(perReplica(config.apiRateLimit, config.apiReplicas));
  const tooMany = (reply: FastifyReply, waitMs: number, detail: string) => {
    reply.header('retry-after', retryAfterSeconds(waitMs));
    return sendProblem(reply, problem(429, 'rate_limited', detail));
  };
  app.addHook('onRequest', async (req, reply) => {
    if (OPERATIONAL_PATHS.has(req.url.split('?')[0]!)) return;
    const wait = byAddress.hit(clientOf(req.ip));
    if (wait !== null) {
      deps.metrics.apiRateLimited.inc({ limit: 'address' });
      return tooMany(reply, wait, `More than ${byAddress.max} requests per second from this address; retry shortly`);
    }
  });
  // A body-less POST (cancel, rotate_secret, test, redeliver) with Content-Type:
  // application/json and nothing after it, as many HTTP clients send, is no body
  // rather than a 400; a route that needs a body still says so (422).
  const json = app.getDefaultJsonParser('error', 'ignore');
  app.removeContentTypeParser('application/json');
  // JSON is the only body the API reads: text/plain too is 415, not a string for the schema to refuse.
  app.removeContentTypeParser('text/plain');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (req, body, done) =>
    body === ''
      ? done(null, undefined)
      : json(req, body as string, (err, parsed) => {
          if (err) return done(err);
          try {
            refuseIllFormedText(parsed);
            done(null, parsed);
          } catch (refused) {
            done(refused as Error);
          }
        }),
  );
  // A query string has no types: its integers are parsed explicitly, before the schema sees them.
  app.addHook('preValidation', async (req) => {
    parseQueryIntegers(req.routeOptions.schema?.querystring, req.query);
  });
  app.setNotFoundHandler((req, reply) =>
    sendProblem(reply, problem(404, 'route_not_found', `No route for ${req.method} ${req.url.split('?')[0]}`)),
  );

  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Handset API',
        version: '1.0.0',
        description:
          'Messages, calls and webhooks on Telnyx, exactly once. Authenticate with `Authorization: Bearer <api key>`. ' +
          `Errors are RFC 9457 problem+json with a stable \`code\`, each explained at [${ERRORS_PAGE}](${ERRORS_PAGE}). ` +
          'Lists take `limit` and `starting_after`. POST creates accept an `Idempotency-Key` header.',
        license: { name: 'UNLICENSED (proprietary)', url: 'https://docs.handset.dev/license' },
      },
      servers: [{ url: 'http://127.0.0.1:3000', description: 'handset dev, on its default HANDSET_API_PORT' }],
      tags: API_TAGS.map((t) => ({ ...t })),
      components: { securitySchemes: { bearerAuth: { type: 'http', scheme: 'bearer' } } },
      security: [{ bearerAuth: [] }],
      // The OpenAPI types want every schema as their own; ours are plain JSON Schema.
      webhooks: webhooksDocument(deps.events ?? {}) as Record<string, never>,
    },
    hideUntagged: true,
    // Named schemas become components, defaulted query parameters optional (openapi.ts).
    transformObject: (doc) =>
      hoistComponents(optionalWhenDefaulted(('openapiObject' in doc ? doc.openapiObject : {}) as object)) as never,
  });
  await registerDocs(app as unknown as FastifyInstance);
  app.get('/openapi.json', async () => app.swagger());

  // Keys seen recently are answered from memory while a revoke would reach this process (accounts/auth.ts).
  const auth = new Authenticator({ pool: deps.pool, log: deps.log, metrics: deps.metrics });
  if (!deps.describeOnly) await auth.start();
  app.addHook('onClose', () => auth.stop());
  await app.register(
    async (v1) => {
      v1.decorateRequest('principal', null as unknown as Principal);
      v1.addHook('onRoute', withStandardProblems);
      v1.addHook('onRequest', async (req, reply) => {
        const key = bearerCredential(req.headers.authorization);
        const principal = key ? await auth.authenticate(key) : null;
        if (!principal) {
          reply.header('www-authenticate', 'Bearer');
          return sendProblem(
            reply,
            problem(401, 'unauthorized', key ? 'Invalid or revoked API key' : 'Missing Bearer API key'),
          );
        }
        req.principal = principal;
        // Per API key, right after authentication (a key is 192 random bits: guessing is not the threat, a runaway
        // client is); a key this process has seen was authenticated from memory, so its 429 costs no lookup.
        const wait = byKey.hit(principal.apiKeyId);
        if (wait !== null) {
          deps.metrics.apiRateLimited.inc({ limit: 'key' });
          return tooMany(reply, wait, `More than ${byKey.max} requests per second with this API key; retry shortly`);
        }
      });
      // Routes with limits of their own (redeliveries per account and minute) declare them in config.rateLimit.
      await v1.register(rateLimit, {
        global: false,
        hook: 'preHandler',
        keyGenerator: (req) => req.principal?.apiKeyId ?? req.ip,
        errorResponseBuilder: (_req, ctx) => ({
          statusCode: 429,
          message: `Rate limit of ${ctx.max} requests exceeded; retry in ${ctx.after}`,
        }),
      });
      for (const routes of deps.routes) routes(v1 as unknown as ApiApp, { ...deps, apiKeys: auth });
    },
    { prefix: '/v1' },
  );

  registerOperationalRoutes(app as unknown as FastifyInstance, { pool: deps.pool, metrics: deps.metrics });
  registerConsoleRoutes(app as unknown as FastifyInstance);
  return app as unknown as FastifyInstance;
}
