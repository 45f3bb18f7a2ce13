// Customer API for webhook endpoints (create, list, get, patch, delete,
// rotate_secret, their recent attempts) and for an event's deliveries (the
// delivery log, redeliver).

import { Type } from 'typebox';
import { Sequence } from '../api/fields.js';
import { createIdempotently, sendCreated } from '../api/idempotency.js';
import { ListQuery, listOf, page } from '../api/pagination.js';
import { ApiError, notFound, unprocessable } from '../api/problem.js';
import type { ApiRoutes } from '../api/server.js';
import { withTx } from '../db/tx.js';
import { EVENT_TYPES, eventOfAccount } from '../outbox/outbox.sql.js';
import {
  attemptListForEndpoint,
  deliveriesToRedeliver,
  deliveryListForEvent,
  type AttemptRow,
} from './deliveries.sql.js';
import { scheduleDeliveries } from './schedule.js';
import {
  endpointInsert,
  endpointDelete,
  endpointOfAccount,
  endpointList,
  endpointRotateSecret,
  endpointUpdate,
  type EndpointRow,
} from './endpoints.sql.js';
import { newEndpointSecret } from './signature.js';
import { checkEndpointUrl } from './ssrf.js';

const SECRET_OVERLAP_MS = 24 * 3600 * 1000;

const EventTypeList = Type.Array(Type.Enum([...EVENT_TYPES]), {
  uniqueItems: true,
  description: 'Event types to receive; empty or absent means all',
});

const Endpoint = Type.Object({
  id: Type.String(),
  url: Type.String(),
  description: Type.Union([Type.String(), Type.Null()]),
  event_types: Type.Array(Type.String()),
  enabled: Type.Boolean(),
  disabled_reason: Type.Union([Type.String(), Type.Null()]),
  disabled_at: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
  consecutive_failures: Type.Integer(),
  created_at: Type.String({ format: 'date-time' }),
  updated_at: Type.String({ format: 'date-time' }),
  sequence: Sequence,
  secret: Type.Optional(Type.String({ description: 'whsec_…; shown only on create and rotate_secret' })),
});

const IdParams = Type.Object({ id: Type.String({ maxLength: 64 }) });

function endpointResource(e: EndpointRow, withSecret = false) {
  return {
    id: e.id,
    url: e.url,
    description: e.description,
    event_types: e.event_types,
    enabled: e.enabled,
    disabled_reason: e.disabled_reason,
    disabled_at: e.disabled_at?.toISOString() ?? null,
    consecutive_failures: e.consecutive_failures,
    created_at: e.created_at.toISOString(),
    updated_at: e.updated_at.toISOString(),
    sequence: e.sequence,
    ...(withSecret ? { secret: e.secret } : {}),
  };
}

const Attempt = Type.Object({
  attempt: Type.Integer(),
  trigger: Type.String(),
  url: Type.String(),
  started_at: Type.String({ format: 'date-time' }),
  duration_ms: Type.Integer(),
  response_status: Type.Union([Type.Integer(), Type.Null()]),
  response_excerpt: Type.Union([Type.String(), Type.Null()]),
  error: Type.Union([Type.String(), Type.Null()]),
});

const EndpointAttempt = Type.Object({
  id: Type.String(),
  delivery_id: Type.String(),
  event_id: Type.String(),
  event_type: Type.String(),
  ...Attempt.properties,
  succeeded: Type.Boolean({ description: 'a 2xx answer within the timeout' }),
});

const Delivery = Type.Object({
  id: Type.String(),
  event_id: Type.String(),
  endpoint_id: Type.String(),
  url: Type.String(),
  status: Type.String({ description: 'pending, succeeded, failed or skipped' }),
  attempts: Type.Array(Attempt),
  next_attempt_at: Type.Union([Type.String({ format: 'date-time' }), Type.Null()]),
});

export const deliveryRoutes: ApiRoutes = (app, ctx) => {
  const tags = ['Webhook endpoints'];

  async function validUrl(url: string) {
    const check = await checkEndpointUrl(url, ctx.config.allowPrivateWebhookUrls);
    if (!check.ok) throw unprocessable(check.code, check.detail, 'url');
    return check.url.toString();
  }

  app.post(
    '/webhook_endpoints',
    {
      schema: {
        tags,
        summary: 'Subscribe a URL to events',
        body: Type.Object(
          {
            url: Type.String({ maxLength: 2048 }),
            event_types: Type.Optional(EventTypeList),
            description: Type.Optional(Type.String({ maxLength: 500 })),
          },
          { additionalProperties: false },
        ),
        response: { 201: Endpoint },
      },
    },
    async (req, reply) => {
      const { accountId } = req.principal;
      const url = await validUrl(req.body.url);
      const created = await createIdempotently(ctx.pool, req, accountId, async (tx) => {
        const e = await endpointInsert(tx, {
          accountId,
          url,
          description: req.body.description ?? null,
          eventTypes: req.body.event_types ?? [],
          secret: newEndpointSecret(),
        });
        return { status: 201, body: endpointResource(e, true) };
      });
      return sendCreated(reply, created);
    },
  );

  app.get(
    '/webhook_endpoints',
    { schema: { tags, summary: 'List endpoints', querystring: ListQuery, response: { 200: listOf(Endpoint) } } },
    async (req) => {
      const rows = await endpointList(
        ctx.pool,
        req.principal.accountId,
        req.query.limit,
        req.query.starting_after ?? null,
      );
      const p = page(rows, req.query.limit);
      return { data: p.data.map((e) => endpointResource(e)), has_more: p.has_more };
    },
  );

  app.get(
    '/webhook_endpoints/:id',
    { schema: { tags, summary: 'Get an endpoint', params: IdParams, response: { 200: Endpoint } } },
    async (req) => {
      const e = await endpointOfAccount(ctx.pool, req.principal.accountId, req.params.id);
      if (!e) throw notFound('webhook endpoint');
      return endpointResource(e);
    },
  );

  app.patch(
    '/webhook_endpoints/:id',
    {
      schema: {
        tags,
        summary: 'Update an endpoint; {"enabled":true} re-enables it and resets its failure count',
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
        response: { 200: Endpoint },
      },
    },
    async (req) => {
      const url = req.body.url === undefined ? undefined : await validUrl(req.body.url);
      const e = await withTx(ctx.pool, (tx) =>
        endpointUpdate(tx, req.principal.accountId, req.params.id, {
          url,
          description: req.body.description,
          eventTypes: req.body.event_types,
          enabled: req.body.enabled,
        }),
      );
      if (!e) throw notFound('webhook endpoint');
      return endpointResource(e);
    },
  );

  app.delete(
    '/webhook_endpoints/:id',
    {
      schema: {
        tags,
        summary: 'Delete an endpoint',
        params: IdParams,
        response: { 200: Type.Object({ id: Type.String(), deleted: Type.Boolean() }) },
      },
    },
    async (req) => {
      const deleted = await withTx(ctx.pool, (tx) => endpointDelete(tx, req.principal.accountId, req.params.id));
      if (!deleted) throw notFound('webhook endpoint');
      return { id: req.params.id, deleted: true };
    },
  );

  app.post(
    '/webhook_endpoints/:id/rotate_secret',
    {
      schema: {
        tags,
        summary: 'Rotate the signing secret; the old one keeps signing alongside for 24 h',
        params: IdParams,
        response: { 200: Endpoint },
      },
    },
    async (req) => {
      const e = await withTx(ctx.pool, (tx) =>
        endpointRotateSecret(
          tx,
          req.principal.accountId,
          req.params.id,
          newEndpointSecret(),
          new Date(Date.now() + SECRET_OVERLAP_MS),
        ),
      );
      if (!e) throw notFound('webhook endpoint');
      return endpointResource(e, true);
    },
  );

  app.get(
    '/webhook_endpoints/:id/attempts',
    {
      schema: {
        tags,
        summary: "The endpoint's delivery attempts, newest first (its health: outcomes and latency)",
        params: IdParams,
        querystring: ListQuery,
        response: { 200: listOf(EndpointAttempt) },
      },
    },
    async (req) => {
      const e = await endpointOfAccount(ctx.pool, req.principal.accountId, req.params.id);
      if (!e) throw notFound('webhook endpoint');
      const rows = await attemptListForEndpoint(ctx.pool, e.id, req.query.limit, req.query.starting_after ?? null);
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
        summary: "An event's deliveries and every attempt",
        params: IdParams,
        response: { 200: listOf(Delivery) },
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
      schema: {
        tags: eventTags,
        summary:
          'Send the event once more (same id, fresh signatures) to its enabled endpoints; each is an attempt of its own',
        params: IdParams,
        response: { 202: Type.Object({ event_id: Type.String(), deliveries: Type.Array(Type.String()) }) },
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
