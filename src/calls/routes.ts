// Customer API for calls: place a sequential-ring call, read one with its legs, list.

import { Type } from 'typebox';
import { named, Nullable, Sequence, Time } from '../api/fields.js';
import { createIdempotently, IdempotencyHeaders, sendCreated } from '../api/idempotency.js';
import { ok, problems } from '../api/openapi.js';
import { cursorOf, listOf, listQuery, page } from '../api/pagination.js';
import { notFound, unprocessable } from '../api/problem.js';
import { isRefusal } from '../api/refusal.js';
import type { ApiRoutes } from '../api/server.js';
import type { EventSchemas } from '../outbox/outbox.sql.js';
import { E164 } from '../numbers/numbers.js';
import { callResource, createOutboundCall, MAX_TARGETS } from './calls.js';
import {
  CALL_DIRECTIONS,
  CALL_STATUSES,
  callList,
  callOfAccount,
  LEG_FACTS,
  LEG_STATUSES,
  legsOf,
} from './calls.sql.js';

const CallStatus = named('CallStatus', Type.Enum([...CALL_STATUSES]));
const CallDirection = named('CallDirection', Type.Enum([...CALL_DIRECTIONS]));

const Leg = named(
  'Leg',
  Type.Object({
    id: Type.String(),
    position: Type.Integer(),
    to: Type.String(),
    status: named('LegStatus', Type.Enum([...LEG_STATUSES])),
    hangup_cause: Nullable(Type.String()),
    dialed_at: Nullable(Time),
    answered_at: Nullable(Time),
    ended_at: Nullable(Time),
    reconciled: Type.Array(Type.Enum([...LEG_FACTS]), {
      description: "the leg's facts (answered, hangup) learned by asking the carrier because their webhook never came",
    }),
  }),
);

const Call = named(
  'Call',
  Type.Object({
    id: Type.String(),
    direction: CallDirection,
    from: Type.String(),
    to: Type.Array(Type.String(), { description: 'ring targets, in order' }),
    number: Type.String({ description: 'the Handset number involved' }),
    status: CallStatus,
    ring_timeout_secs: Type.Integer(),
    tenant_id: Nullable(Type.String()),
    answered_at: Nullable(Time),
    ended_at: Nullable(Time),
    duration_seconds: Nullable(Type.Integer()),
    record: Type.Boolean({ description: 'the answered call is recorded' }),
    transcribe: Type.Boolean({ description: 'its recording is transcribed once the call ends' }),
    recording_error: Nullable(Type.String({ description: 'why the carrier could not record it' })),
    created_at: Time,
    sequence: Sequence,
    legs: Type.Array(Leg),
  }),
);

/** The events about a call: each carries the call, with its legs, as it is after its transition. */
export const callEvents = {
  'call.initiated': Call,
  'call.answered': Call,
  'call.completed': Call,
  'call.missed': Call,
  'call.recording.failed': Call,
} as const satisfies EventSchemas;

export const callRoutes: ApiRoutes = (app, ctx) => {
  const tags = ['Calls'];
  app.post(
    '/calls',
    {
      schema: {
        tags,
        operationId: 'createCall',
        summary: 'Place a call that rings a list of numbers in order until one answers',
        headers: IdempotencyHeaders,
        body: Type.Object(
          {
            from: E164,
            to: Type.Array(E164, { minItems: 1, maxItems: MAX_TARGETS, 'x-code': 'invalid_ring_targets' }),
            ring_timeout_secs: Type.Optional(
              Type.Integer({ minimum: 5, maximum: 120, default: 20, 'x-code': 'invalid_ring_timeout' }),
            ),
            record: Type.Optional(Type.Boolean({ description: 'record the call once answered (default false)' })),
            transcribe: Type.Optional(
              Type.Boolean({ description: 'transcribe the recording when the call ends; implies record' }),
            ),
          },
          { additionalProperties: false },
        ),
        response: { 201: ok('The call, ringing its first target', Call), ...problems(409) },
      },
    },
    async (req, reply) => {
      const { accountId } = req.principal;
      const created = await createIdempotently(ctx.pool, req, accountId, async (tx) => {
        const call = await createOutboundCall(
          tx,
          {
            accountId,
            from: req.body.from,
            to: req.body.to,
            ringTimeoutSecs: req.body.ring_timeout_secs ?? 20,
            record: req.body.record ?? false,
            transcribe: req.body.transcribe ?? false,
          },
          (carrier) => ctx.carriers.get(carrier)?.carriesCalls === true,
        );
        if (isRefusal(call)) throw unprocessable(call.code, call.detail, call.param);
        return { status: 201, body: callResource(call, await legsOf(tx, call.id)) };
      });
      return sendCreated(reply, created);
    },
  );

  app.get(
    '/calls',
    {
      schema: {
        tags,
        operationId: 'listCalls',
        summary: 'List calls, newest first',
        querystring: listQuery({
          status: Type.Optional(CallStatus),
          direction: Type.Optional(CallDirection),
        }),
        response: { 200: ok('A page of calls', listOf(Call)) },
      },
    },
    async (req) => {
      const q = req.query;
      const rows = await callList(
        ctx.pool,
        req.principal.accountId,
        { status: q.status, direction: q.direction },
        q.limit,
        await cursorOf(q.starting_after, (id) => callOfAccount(ctx.pool, req.principal.accountId, id)),
      );
      const p = page(rows, q.limit);
      return {
        data: await Promise.all(p.data.map(async (c) => callResource(c, await legsOf(ctx.pool, c.id)))),
        has_more: p.has_more,
      };
    },
  );

  app.get(
    '/calls/:id',
    {
      schema: {
        tags,
        operationId: 'getCall',
        summary: 'Get a call with its legs',
        params: Type.Object({ id: Type.String({ maxLength: 64 }) }),
        response: { 200: ok('The call with its legs', Call) },
      },
    },
    async (req) => {
      const call = await callOfAccount(ctx.pool, req.principal.accountId, req.params.id);
      if (!call) throw notFound('call');
      return callResource(call, await legsOf(ctx.pool, call.id));
    },
  );
};
