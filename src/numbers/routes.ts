// Customer API for phone numbers.

import { Type } from 'typebox';
import { tenantOfAccount } from '../accounts/accounts.sql.js';
import { createIdempotently, IdempotencyHeaders, sendCreated } from '../api/idempotency.js';
import { ok, problems } from '../api/openapi.js';
import { ListQuery, listOf, page } from '../api/pagination.js';
import { ApiError, notFound, unprocessable } from '../api/problem.js';
import type { ApiRoutes } from '../api/server.js';
import { E164, PhoneNumber, phoneNumberResource } from './numbers.js';
import { numberInsert, numberList, numberOfAccount } from './numbers.sql.js';

export const numberRoutes: ApiRoutes = (app, ctx) => {
  const tags = ['Phone numbers'];
  app.post(
    '/phone_numbers',
    {
      schema: {
        tags,
        operationId: 'createPhoneNumber',
        summary: 'Add a number to the account',
        headers: IdempotencyHeaders,
        body: Type.Object(
          {
            number: E164,
            inbound_ring: Type.Optional(
              Type.Array(E164, { maxItems: 10, description: 'ring these in order on an inbound call' }),
            ),
            ring_timeout_secs: Type.Optional(Type.Integer({ minimum: 5, maximum: 120, default: 20 })),
            record: Type.Optional(Type.Boolean({ description: 'record inbound calls once bridged (default false)' })),
            transcribe: Type.Optional(
              Type.Boolean({ description: 'transcribe recorded inbound calls when they end; implies record' }),
            ),
            tenant_id: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
            carrier: Type.Optional(
              Type.String({
                minLength: 1,
                maxLength: 64,
                description: "the number's carrier; the deployment's first by default",
              }),
            ),
          },
          { additionalProperties: false },
        ),
        response: {
          201: ok('The number, routing to this account', PhoneNumber),
          ...problems(404, 409),
        },
      },
    },
    async (req, reply) => {
      const { accountId } = req.principal;
      const created = await createIdempotently(ctx.pool, req, accountId, async (tx) => {
        // `!== undefined`, not truthiness: any string given must name one of the account's tenants.
        if (req.body.tenant_id !== undefined && !(await tenantOfAccount(tx, accountId, req.body.tenant_id)))
          throw notFound('tenant');
        const carrier = req.body.carrier ?? ctx.carriers.keys().next().value!;
        if (!ctx.carriers.has(carrier)) {
          throw unprocessable(
            'unknown_carrier',
            `no carrier named "${carrier}" (${[...ctx.carriers.keys()].join(', ')})`,
            'carrier',
          );
        }
        const n = await numberInsert(tx, {
          accountId,
          tenantId: req.body.tenant_id ?? null,
          carrier,
          number: req.body.number,
          inboundRing: req.body.inbound_ring ?? [],
          ringTimeoutSecs: req.body.ring_timeout_secs ?? 20,
          inboundRecord: req.body.record ?? false,
          inboundTranscribe: req.body.transcribe ?? false,
        });
        if (!n) throw new ApiError(409, 'number_taken', `${req.body.number} already belongs to an account`, 'number');
        return { status: 201, body: phoneNumberResource(n) };
      });
      return sendCreated(reply, created);
    },
  );

  app.get(
    '/phone_numbers',
    {
      schema: {
        tags,
        operationId: 'listPhoneNumbers',
        summary: 'List numbers',
        querystring: ListQuery,
        response: { 200: ok('A page of numbers', listOf(PhoneNumber)) },
      },
    },
    async (req) => {
      const rows = await numberList(
        ctx.pool,
        req.principal.accountId,
        req.query.limit,
        req.query.starting_after ?? null,
      );
      const p = page(rows, req.query.limit);
      return { data: p.data.map(phoneNumberResource), has_more: p.has_more };
    },
  );

  app.get(
    '/phone_numbers/:id',
    {
      schema: {
        tags,
        operationId: 'getPhoneNumber',
        summary: 'Get a number',
        params: Type.Object({ id: Type.String({ maxLength: 64 }) }),
        response: { 200: ok('The number', PhoneNumber) },
      },
    },
    async (req) => {
      const n = await numberOfAccount(ctx.pool, req.principal.accountId, req.params.id);
      if (!n) throw notFound('phone number');
      return phoneNumberResource(n);
    },
  );
};
