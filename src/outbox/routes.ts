// Customer API for the account's outbound events, newest first.

import { Type } from 'typebox';
import { named } from '../api/fields.js';
import { ok } from '../api/openapi.js';
import { cursorOf, listOf, listQuery, page } from '../api/pagination.js';
import { notFound } from '../api/problem.js';
import type { ApiRoutes } from '../api/server.js';
import { eventResource } from './outbox.js';
import { EVENT_TYPES, eventList, eventOfAccount } from './outbox.sql.js';

/** Every customer event type, as the API and the webhooks name them. */
export const EventType = named('EventType', Type.Enum([...EVENT_TYPES]));

const Event = named(
  'Event',
  Type.Object({
    id: Type.String(),
    type: EventType,
    timestamp: Type.String({ format: 'date-time' }),
    account_id: Type.String(),
    data: Type.Record(Type.String(), Type.Unknown(), {
      description: 'the resource after the transition; its schema per type is in the webhooks section',
    }),
  }),
);

export const eventRoutes: ApiRoutes = (app, ctx) => {
  const tags = ['Events'];
  app.get(
    '/events',
    {
      schema: {
        tags,
        operationId: 'listEvents',
        summary: 'List events, newest first',
        querystring: listQuery({
          type: Type.Optional(EventType),
          subject_id: Type.Optional(Type.String({ maxLength: 64, description: 'only events about this resource' })),
        }),
        response: { 200: ok('A page of events', listOf(Event)) },
      },
    },
    async (req) => {
      const q = req.query;
      const rows = await eventList(
        ctx.pool,
        req.principal.accountId,
        { type: q.type, subjectId: q.subject_id },
        q.limit,
        await cursorOf(q.starting_after, (id) => eventOfAccount(ctx.pool, req.principal.accountId, id)),
      );
      const p = page(rows, q.limit);
      return { data: p.data.map(eventResource), has_more: p.has_more };
    },
  );

  app.get(
    '/events/:id',
    {
      schema: {
        tags,
        operationId: 'getEvent',
        summary: 'Get an event',
        params: Type.Object({ id: Type.String({ maxLength: 64 }) }),
        response: { 200: ok('The event', Event) },
      },
    },
    async (req) => {
      const ev = await eventOfAccount(ctx.pool, req.principal.accountId, req.params.id);
      if (!ev) throw notFound('event');
      return eventResource(ev);
    },
  );
};
