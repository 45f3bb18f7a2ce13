// Customer API for the opt-out list: read it, add a pair by hand (for example
// imported from another system), and opt a pair back in. Entries made here are
// announced like those a STOP or the carrier made.

import { Type } from 'typebox';
import { named, Nullable, Sequence, Time } from '../api/fields.js';
import { createIdempotently, IdempotencyHeaders, sendCreated } from '../api/idempotency.js';
import { ok, problems } from '../api/openapi.js';
import { cursorOf, listOf, listQuery, page } from '../api/pagination.js';
import { notFound, unprocessable } from '../api/problem.js';
import type { ApiRoutes } from '../api/server.js';
import { withTx } from '../db/tx.js';
import { E164 } from '../numbers/numbers.js';
import { numberOwned } from '../numbers/numbers.sql.js';
import type { EventSchemas } from '../outbox/outbox.sql.js';
import { optInById, optOut, optOutResource } from './optouts.js';
import { OPT_OUT_SOURCES, optOutActive, optOutList, optOutOfAccount } from './optouts.sql.js';

const OptOutSource = named(
  'OptOutSource',
  Type.Enum([...OPT_OUT_SOURCES], {
    description:
      'keyword: the recipient texted STOP; carrier: the carrier refused a send as opted out; api: entered here',
  }),
);

const OptOut = named(
  'OptOut',
  Type.Object({
    id: Type.String(),
    number: Type.String({ description: "the account's number the recipient opted out of" }),
    recipient: Type.String(),
    source: OptOutSource,
    tenant_id: Nullable(Type.String()),
    created_at: Time,
    deleted_at: Nullable(Time),
    sequence: Sequence,
  }),
);

/** The events about the list: each carries the opt-out, ended (deleted_at set) for opt_out.deleted. */
export const optOutEvents = {
  'opt_out.created': OptOut,
  'opt_out.deleted': OptOut,
} as const satisfies EventSchemas;

const IdParams = Type.Object({ id: Type.String({ maxLength: 64 }) });

export const optOutRoutes: ApiRoutes = (app, ctx) => {
  const tags = ['Opt-outs'];
  app.get(
    '/opt_outs',
    {
      schema: {
        tags,
        operationId: 'listOptOuts',
        summary: 'List the recipients opted out of messages from your numbers, newest first',
        querystring: listQuery({ number: Type.Optional(E164), recipient: Type.Optional(E164) }),
        response: { 200: ok('A page of opt-outs', listOf(OptOut)) },
      },
    },
    async (req) => {
      const q = req.query;
      const rows = await optOutList(
        ctx.pool,
        req.principal.accountId,
        { number: q.number, recipient: q.recipient },
        q.limit,
        await cursorOf(q.starting_after, (id) => optOutOfAccount(ctx.pool, req.principal.accountId, id)),
      );
      const p = page(rows, q.limit);
      return { data: p.data.map(optOutResource), has_more: p.has_more };
    },
  );

  app.get(
    '/opt_outs/:id',
    {
      schema: {
        tags,
        operationId: 'getOptOut',
        summary: 'Get an opt-out',
        params: IdParams,
        response: { 200: ok('The opt-out', OptOut) },
      },
    },
    async (req) => {
      const o = await optOutOfAccount(ctx.pool, req.principal.accountId, req.params.id);
      if (!o) throw notFound('opt-out');
      return optOutResource(o);
    },
  );

  app.post(
    '/opt_outs',
    {
      schema: {
        tags,
        operationId: 'createOptOut',
        summary: 'Opt a recipient out of messages from one of your numbers (200 with the entry if it already is)',
        headers: IdempotencyHeaders,
        body: Type.Object({ number: E164, recipient: E164 }, { additionalProperties: false }),
        response: {
          200: ok('The recipient was already opted out: the existing entry', OptOut),
          201: ok('The opt-out, announced as opt_out.created', OptOut),
          ...problems(409),
        },
      },
    },
    async (req, reply) => {
      const { accountId } = req.principal;
      const created = await createIdempotently(ctx.pool, req, accountId, async (tx) => {
        const number = await numberOwned(tx, accountId, req.body.number);
        if (!number) {
          throw unprocessable(
            'number_not_owned',
            `${req.body.number} is not one of this account's phone numbers`,
            'number',
          );
        }
        const pair = { accountId, number: req.body.number, recipient: req.body.recipient };
        const row = await optOut(tx, { ...pair, tenantId: number.tenant_id, source: 'api' }, new Date());
        if (row) return { status: 201, body: optOutResource(row) };
        return { status: 200, body: optOutResource((await optOutActive(tx, pair))!) };
      });
      return sendCreated(reply, created);
    },
  );

  app.delete(
    '/opt_outs/:id',
    {
      schema: {
        tags,
        operationId: 'deleteOptOut',
        summary: 'Opt the recipient back in: messages from the number may reach them again',
        params: IdParams,
        response: { 200: ok('The opt-out, ended, announced as opt_out.deleted', OptOut) },
      },
    },
    async (req) => {
      const ended = await withTx(ctx.pool, (tx) => optInById(tx, req.principal.accountId, req.params.id, new Date()));
      if (!ended) throw notFound('opt-out');
      return optOutResource(ended);
    },
  );
};
