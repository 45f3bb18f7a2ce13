// Customer API for webhook endpoints (create, list, get, patch, delete,
// rotate_secret, test, recover, their recent attempts and recoveries) and for an
// event's deliveries (the delivery log, redeliver).

import { Type } from 'typebox';
import { named, Nullable, Sequence, Time } from '../api/fields.js';
import { createIdempotently, IdempotencyHeaders, sendCreated } from '../api/idempotency.js';
import { ok, problems } from '../api/openapi.js';
import { cursorOf, listOf, ListQuery, page } from '../api/pagination.js';
import { ApiError, conflict, notFound, unprocessable } from '../api/problem.js';
import { isRefusal } from '../api/refusal.js';
import type { ApiRoutes } from '../api/server.js';
import { withTx } from '../db/tx.js';
import { enqueue } from '../jobs/enqueue.js';
import { jobKeys } from '../jobs/keys.js';
import { type EventSchemas, eventOfAccount } from '../outbox/outbox.sql.js';
import { EventType } from '../outbox/routes.js';
import {
  attemptListForEndpoint,
  attemptOfEndpoint,
  deliveriesToRedeliver,
  deliveryListForEvent,
  DELIVERY_STATUSES,
  ATTEMPT_TRIGGERS,
  type AttemptRow,
} from './deliveries.sql.js';
import {
  createEndpoint,
  deleteEndpoint,
  disableEndpoint,
  enableEndpoint,
  endpointResource,
  rotateSecret,
  sendTestEvent,
} from './endpoints.js';
import { DISABLE_REASONS, endpointOfAccount, endpointList, endpointUpdate } from './endpoints.sql.js';
import {
  RECOVERY_STATUSES,
  type RecoveryRow,
  recoveriesAskedSince,
  recoveryInsert,
  recoveryListOfEndpoint,
} from './recoveries.sql.js';
import { scheduleDeliveries } from './schedule.js';
import { checkEndpointUrl } from './ssrf.js';

/** Recoveries one account may ask for per hour, and redeliveries per minute. */
export const RECOVERIES_PER_HOUR = 10;
export const REDELIVERIES_PER_MINUTE = 60;

const EventTypeList = Type.Array(EventType, {
  uniqueItems: true,
  description: 'Event types to receive; empty or absent means all (webhook_endpoint.test only when asked for)',
});

const DisableReason = named('WebhookEndpointDisabledReason', Type.Enum([...DISABLE_REASONS]));

export const Endpoint = named(
  'WebhookEndpoint',
  Type.Object({
    id: Type.String(),
    url: Type.String(),
    description: Nullable(Type.String()),
    event_types: Type.Array(EventType, { description: 'empty: every type' }),
    enabled: Type.Boolean(),
    disabled_reason: Nullable(DisableReason),
    disabled_at: Nullable(Time),
    consecutive_failures: Type.Integer(),
    timing_out: Type.Boolean({
      description:
        'its last attempt got no answer in time: one attempt at a time until it answers (each with the whole timeout)',
    }),
    created_at: Time,
    updated_at: Time,
    sequence: Sequence,
  }),
);

const EndpointWithSecret = named(
  'WebhookEndpointWithSecret',
  Type.Object({
    ...Endpoint.properties,
    secret: Type.Optional(Type.String({ description: 'whsec_…; shown only in the response that made it' })),
    secret_omitted: Type.Optional(
      Type.String({ description: 'why `secret` is absent (a replayed request: the secret is shown only once)' }),
    ),
  }),
);

const Recovery = named(
  'Recovery',
  Type.Object({
    id: Type.String(),
    endpoint_id: Type.String(),
    since: Time,
    status: named('RecoveryStatus', Type.Enum([...RECOVERY_STATUSES])),
    resent: Type.Integer({ description: 'deliveries re-sent and answered 2xx so far' }),
    stopped_reason: Nullable(Type.String()),
    created_at: Time,
    finished_at: Nullable(Time),
  }),
);

const recoveryResource = (r: RecoveryRow) => ({
  id: r.id,
  endpoint_id: r.endpoint_id,
  since: r.since.toISOString(),
  status: r.status,
  resent: r.resent,
  stopped_reason: r.stopped_reason,
  created_at: r.created_at.toISOString(),
  finished_at: r.finished_at?.toISOString() ?? null,
});

const LastFailure = Nullable(
  Type.Object({ at: Time, status: Nullable(Type.Integer()), error: Nullable(Type.String()) }),
);

/** The operational events: each carries the endpoint it is about (never delivered to that endpoint). */
export const endpointEvents = {
  'webhook_endpoint.disabled': Type.Object({
    ...Endpoint.properties,
    reason: DisableReason,
    last_failure: LastFailure,
  }),
  'webhook_endpoint.enabled': Endpoint,
  'webhook_delivery.exhausted': Type.Object({
    ...Endpoint.properties,
    event_id: Type.String({ description: 'the event whose delivery failed after its last retry' }),
    delivery_id: Type.String(),
  }),
  'webhook_endpoint.test': Type.Object({ ...Endpoint.properties, message: Type.String() }),
} as const satisfies EventSchemas;

const IdParams = Type.Object({ id: Type.String({ maxLength: 64 }) });

const SECRET_OMITTED = 'The secret is shown only in the first response; rotate_secret makes a new one';

const AttemptTrigger = named('DeliveryAttemptTrigger', Type.Enum([...ATTEMPT_TRIGGERS]));

const Attempt = named(
  'DeliveryAttempt',
  Type.Object({
    attempt: Type.Integer(),
    trigger: AttemptTrigger,
    url: Type.String(),
    started_at: Type.String({ format: 'date-time' }),
    duration_ms: Type.Integer(),
    response_status: Type.Union([Type.Integer(), Type.Null()]),
    response_excerpt: Type.Union([Type.String(), Type.Null()]),
    error: Type.Union([Type.String(), Type.Null()]),
  }),
);

const EndpointAttempt = named(
  'WebhookEndpointAttempt',
  Type.Object({
    id: Type.String(),
    delivery_id: Type.String(),
    event_id: Type.String(),
    event_type: EventType,
    ...Attempt.properties,
    succeeded: Type.Boolean({ description: 'a 2xx answer within the timeout' }),
  }),
);

const Delivery = named(
  'Delivery',
  Type.Object({
    id: Type.String(),
    event_id: Type.String(),
    endpoint_id: Type.String(),
    url: Type.String(),
    status: named('DeliveryStatus', Type.Enum([...DELIVERY_STATUSES])),
    attempts: Type.Array(Attempt),
    next_attempt_at: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  }),
);

export const deliveryRoutes: ApiRoutes = (app, ctx) => {
  const tags = ['Webhook endpoints'];

  async function validUrl(url: string) {
    const check = await checkEndpointUrl(url, ctx.config.allowPrivateWebhookUrls);
    if (!check.ok) throw unprocessable(check.code, check.detail, 'url');
    return check.url.toString();
  }
  async function ownEndpoint(accountId: string, id: string) {
    const e = await endpointOfAccount(ctx.pool, accountId, id);
    if (!e) throw notFound('webhook endpoint');
    return e;
  }

  app.post(
    '/webhook_endpoints',
    {
      schema: {
        tags,
        operationId: 'createWebhookEndpoint',
        summary: 'Subscribe a URL to events',
        headers: IdempotencyHeaders,
        description: `At most HANDSET_ENDPOINTS_PER_ACCOUNT (default 50) per account. The secret is in this response only.`,
        body: Type.Object(
          {
            url: Type.String({ maxLength: 2048 }),
            event_types: Type.Optional(EventTypeList),
            description: Type.Optional(Type.String({ maxLength: 500 })),
          },
          { additionalProperties: false },
        ),
        response: { 201: ok('The endpoint with its signing secret', EndpointWithSecret), ...problems(409) },
      },
    },
    async (req, reply) => {
      const { accountId } = req.principal;
      const url = await validUrl(req.body.url);
      let secret: string | null = null;
      // What is kept for a replay of this request has no secret: it is shown once.
      const created = await createIdempotently(ctx.pool, req, accountId, async (tx) => {
        const made = await createEndpoint(
          tx,
          ctx.keys,
          { accountId, url, description: req.body.description ?? null, eventTypes: req.body.event_types ?? [] },
          ctx.config.endpointsPerAccount,
        );
        if (isRefusal(made)) throw unprocessable(made.code, made.detail, made.param);
        secret = made.secret;
        return { status: 201, body: { ...endpointResource(made.endpoint), secret_omitted: SECRET_OMITTED } };
      });
      const body = created.body as Record<string, unknown>;
      if (secret !== null && !created.replayed) {
        const { secret_omitted: _, ...rest } = body;
        return sendCreated(reply, { ...created, body: { ...rest, secret } });
      }
      return sendCreated(reply, created);
    },
  );

  app.get(
    '/webhook_endpoints',
    {
      schema: {
        tags,
        operationId: 'listWebhookEndpoints',
        summary: 'List endpoints',
        querystring: ListQuery,
        response: { 200: ok('A page of endpoints', listOf(Endpoint)) },
      },
    },
    async (req) => {
      const rows = await endpointList(
        ctx.pool,
        req.principal.accountId,
        req.query.limit,
        await cursorOf(req.query.starting_after, (id) => endpointOfAccount(ctx.pool, req.principal.accountId, id)),
      );
      const p = page(rows, req.query.limit);
      return { data: p.data.map(endpointResource), has_more: p.has_more };
    },
  );

  app.get(
    '/webhook_endpoints/:id',
    {
      schema: {
        tags,
        operationId: 'getWebhookEndpoint',
        summary: 'Get an endpoint',
        params: IdParams,
        response: { 200: ok('The endpoint', Endpoint) },
      },
    },
    async (req) => endpointResource(await ownEndpoint(req.principal.accountId, req.params.id)),
  );

  app.patch(
    '/webhook_endpoints/:id',
    {
      schema: {
        tags,
        operationId: 'updateWebhookEndpoint',
        summary: 'Update an endpoint; {"enabled":true} re-enables it and resets its failure count',
        description:
          "Enabling or disabling announces it to the account's other endpoints (webhook_endpoint.enabled / " +
          '.disabled). Re-enabling re-sends nothing by itself: use recover.',
        params: IdParams,
        body: Type.Object(
          {
            url: Type.Optional(Type.String({ maxLength: 2048 })),
            event_types: Type.Optional(EventTypeList),
            description: Type.Optional(Type.Union([Type.String({ maxLength: 500 }), Type.Null()])),
            enabled: Type.Optional(Type.Boolean()),
          },
          { additionalProperties: false, minProperties: 1 },
        ),
        response: { 200: ok('The endpoint as updated', Endpoint) },
      },
    },
    async (req) => {
      const { accountId } = req.principal;
      const url = req.body.url === undefined ? undefined : await validUrl(req.body.url);
      const { enabled, ...fields } = req.body;
      const e = await withTx(ctx.pool, async (tx) => {
        const now = new Date();
        let row =
          fields.url !== undefined || fields.event_types !== undefined || fields.description !== undefined
            ? await endpointUpdate(tx, accountId, req.params.id, {
                url,
                description: fields.description,
                eventTypes: fields.event_types,
              })
            : await endpointOfAccount(tx, accountId, req.params.id);
        if (!row) throw notFound('webhook endpoint');
        if (enabled === true) row = (await enableEndpoint(tx, accountId, row.id, now)) ?? row;
        if (enabled === false) row = (await disableEndpoint(tx, row.id, 'manual', now)) ?? row;
        return row;
      });
      return endpointResource(e);
    },
  );

  app.delete(
    '/webhook_endpoints/:id',
    {
      schema: {
        tags,
        operationId: 'deleteWebhookEndpoint',
        summary: 'Delete an endpoint (its secrets are wiped)',
        params: IdParams,
        response: { 200: ok('Deleted', Type.Object({ id: Type.String(), deleted: Type.Boolean() })) },
      },
    },
    async (req) => {
      const deleted = await withTx(ctx.pool, (tx) =>
        deleteEndpoint(tx, req.principal.accountId, req.params.id, new Date()),
      );
      if (!deleted) throw notFound('webhook endpoint');
      return { id: req.params.id, deleted: true };
    },
  );

  app.post(
    '/webhook_endpoints/:id/rotate_secret',
    {
      schema: {
        tags,
        operationId: 'rotateWebhookEndpointSecret',
        summary: 'A new signing secret; every secret it replaced in the last 24 h keeps signing beside it until then',
        params: IdParams,
        response: { 200: ok('The endpoint with its new secret', EndpointWithSecret) },
      },
    },
    async (req) => {
      const rotated = await withTx(ctx.pool, (tx) =>
        rotateSecret(tx, ctx.keys, req.principal.accountId, req.params.id, new Date()),
      );
      if (!rotated) throw notFound('webhook endpoint');
      return { ...endpointResource(rotated.endpoint), secret: rotated.secret };
    },
  );

  app.post(
    '/webhook_endpoints/:id/test',
    {
      schema: {
        tags,
        operationId: 'testWebhookEndpoint',
        summary: 'Send one webhook_endpoint.test to this endpoint only, whatever its event_types',
        params: IdParams,
        response: {
          202: ok('The test event, on its way', Type.Object({ event_id: Type.String() })),
          ...problems(409),
        },
      },
    },
    async (req, reply) => {
      const e = await ownEndpoint(req.principal.accountId, req.params.id);
      if (!e.enabled)
        throw conflict('endpoint_disabled', 'Enable the endpoint first: a disabled endpoint gets nothing');
      const eventId = await withTx(ctx.pool, (tx) => sendTestEvent(tx, e, new Date()));
      return reply.code(202).send({ event_id: eventId });
    },
  );

  app.post(
    '/webhook_endpoints/:id/recover',
    {
      schema: {
        tags,
        operationId: 'recoverWebhookEndpoint',
        summary: 'Re-send every failed or skipped delivery since a moment, oldest first, with the original event ids',
        description:
          `In the background, one after the other; stops at the first that fails (ask again to resume). ` +
          `One recovery at a time per endpoint, at most ${RECOVERIES_PER_HOUR} asked per account per hour.`,
        params: IdParams,
        body: Type.Object({ since: Time }, { additionalProperties: false }),
        response: { 202: ok('The recovery, started', Recovery), ...problems(409) },
      },
    },
    async (req, reply) => {
      const { accountId } = req.principal;
      const e = await ownEndpoint(accountId, req.params.id);
      const since = new Date(req.body.since);
      const now = new Date();
      if (since > now) throw unprocessable('invalid_since', 'since must not be in the future', 'since');
      if (!e.enabled) throw conflict('endpoint_disabled', 'Enable the endpoint first: a recovery re-sends to it');
      const r = await withTx(ctx.pool, async (tx) => {
        const asked = await recoveriesAskedSince(tx, accountId, new Date(now.getTime() - 3_600_000));
        if (asked >= RECOVERIES_PER_HOUR) {
          throw new ApiError(
            429,
            'too_many_recoveries',
            `At most ${RECOVERIES_PER_HOUR} recoveries per account per hour`,
            undefined,
            { 'retry-after': '600' },
          );
        }
        const started = await recoveryInsert(tx, { accountId, endpointId: e.id, since });
        if (!started) throw conflict('recovery_in_progress', 'A recovery of this endpoint is still running');
        await enqueue(tx, 'delivery.recover', { recoveryId: started.id }, { jobKey: jobKeys.recovery(started.id) });
        return started;
      });
      return reply.code(202).send(recoveryResource(r));
    },
  );

  app.get(
    '/webhook_endpoints/:id/recoveries',
    {
      schema: {
        tags,
        operationId: 'listWebhookEndpointRecoveries',
        summary: "The endpoint's recent recoveries, newest first, with their progress",
        params: IdParams,
        response: { 200: ok('The recent recoveries', listOf(Recovery)) },
      },
    },
    async (req) => {
      const e = await ownEndpoint(req.principal.accountId, req.params.id);
      return { data: (await recoveryListOfEndpoint(ctx.pool, e.id, 20)).map(recoveryResource), has_more: false };
    },
  );

  app.get(
    '/webhook_endpoints/:id/attempts',
    {
      schema: {
        tags,
        operationId: 'listWebhookEndpointAttempts',
        summary: "The endpoint's delivery attempts, newest first (its health: outcomes and latency)",
        params: IdParams,
        querystring: ListQuery,
        response: { 200: ok('A page of attempts', listOf(EndpointAttempt)) },
      },
    },
    async (req) => {
      const e = await endpointOfAccount(ctx.pool, req.principal.accountId, req.params.id);
      if (!e) throw notFound('webhook endpoint');
      const after = await cursorOf(req.query.starting_after, (id) => attemptOfEndpoint(ctx.pool, e.id, id));
      const rows = await attemptListForEndpoint(ctx.pool, e.id, req.query.limit, after);
      const p = page(rows, req.query.limit);
      return {
        data: p.data.map((a) => ({
          id: a.id,
          delivery_id: a.delivery_id,
          event_id: a.event_id,
          event_type: a.event_type,
          attempt: a.attempt,
          trigger: a.trigger,
          url: a.url,
          started_at: a.started_at.toISOString(),
          duration_ms: a.duration_ms,
          response_status: a.response_status,
          response_excerpt: a.response_excerpt,
          error: a.error,
          succeeded: a.succeeded,
        })),
        has_more: p.has_more,
      };
    },
  );

  const eventTags = ['Events'];

  app.get(
    '/events/:id/deliveries',
    {
      schema: {
        tags: eventTags,
        operationId: 'listEventDeliveries',
        summary: "An event's deliveries and every attempt",
        params: IdParams,
        response: { 200: ok("The event's deliveries", listOf(Delivery)) },
      },
    },
    async (req) => {
      const ev = await eventOfAccount(ctx.pool, req.principal.accountId, req.params.id);
      if (!ev) throw notFound('event');
      const rows = await deliveryListForEvent(ctx.pool, ev.id);
      return {
        data: rows.map((d) => ({
          id: d.id,
          event_id: d.event_id,
          endpoint_id: d.endpoint_id,
          url: d.url,
          status: d.status,
          next_attempt_at: d.next_attempt_at?.toISOString() ?? null,
          attempts: d.attempt_log.map((a: AttemptRow) => ({
            attempt: a.attempt,
            trigger: a.trigger,
            url: a.url,
            started_at: new Date(a.started_at).toISOString(),
            duration_ms: a.duration_ms,
            response_status: a.response_status,
            response_excerpt: a.response_excerpt,
            error: a.error,
          })),
        })),
        has_more: false,
      };
    },
  );

  app.post(
    '/events/:id/redeliver',
    {
      config: {
        rateLimit: {
          max: REDELIVERIES_PER_MINUTE,
          timeWindow: 60_000,
          keyGenerator: (req: { principal?: { accountId: string } }) => `redeliver:${req.principal?.accountId}`,
        },
      },
      schema: {
        tags: eventTags,
        summary:
          'Send the event once more (same id, fresh signatures) to its enabled endpoints; each is an attempt of its own',
        operationId: 'redeliverEvent',
        params: IdParams,
        response: {
          202: ok(
            'The deliveries queued',
            Type.Object({ event_id: Type.String(), deliveries: Type.Array(Type.String()) }),
          ),
          ...problems(409),
        },
      },
    },
    async (req, reply) => {
      const ev = await eventOfAccount(ctx.pool, req.principal.accountId, req.params.id);
      if (!ev) throw notFound('event');
      const ids = await withTx(ctx.pool, async (tx) => {
        const deliveries = await deliveriesToRedeliver(tx, ev.id);
        await scheduleDeliveries(tx, deliveries, 'redeliver');
        return deliveries.map((d) => d.id);
      });
      if (ids.length === 0) {
        throw new ApiError(
          409,
          'nothing_to_redeliver',
          'This event has no delivery to an endpoint that still exists and is enabled',
        );
      }
      return reply.code(202).send({ event_id: ev.id, deliveries: ids });
    },
  );
};
