// Customer API for phone numbers: claim one the carrier account holds, list, get,
// release. A claim asks the carrier before anything else, and answers a number
// held by another account exactly as one the carrier does not know.

import { Type } from 'typebox';
import { named } from '../api/fields.js';
import { tenantOfAccount } from '../accounts/accounts.sql.js';
import { createIdempotently, IdempotencyHeaders, sendCreated } from '../api/idempotency.js';
import { ok, problems } from '../api/openapi.js';
import { cursorOf, listOf, ListQuery, page } from '../api/pagination.js';
import { ApiError, conflict, notFound, Problem, unprocessable } from '../api/problem.js';
import type { ApiRoutes } from '../api/server.js';
import { configuredCarrierNames } from '../carrier/registry.js';
import { withTx } from '../db/tx.js';
import { E164, numberRelease, PhoneNumber, phoneNumberResource } from './numbers.js';
import { numberHeldByAccount, numberInsert, numberList, numberOfAccount } from './numbers.sql.js';

/** One answer for "the carrier account does not hold it" and "another account has it": no existence oracle. */
const unavailable = (number: string) =>
  unprocessable(
    'number_unavailable',
    `${number} cannot be added: it is not a number of this deployment's carrier account that is free to add`,
    'number',
  );

const DeletedPhoneNumber = named('DeletedPhoneNumber', Type.Object({ id: Type.String(), deleted: Type.Boolean() }));

export const numberRoutes: ApiRoutes = (app, ctx) => {
  const tags = ['Phone numbers'];
  app.post(
    '/phone_numbers',
    {
      schema: {
        tags,
        operationId: 'createPhoneNumber',
        summary: 'Add a number to the account',
        description:
          'The number must be in this deployment’s account at its carrier (asked at the carrier) and held by no other ' +
          'account; either way it is not, the answer is the same `422 number_unavailable`. `409 number_exists`: it is ' +
          'already one of this account’s.',
        headers: IdempotencyHeaders,
        body: Type.Object(
          {
            number: E164,
            inbound_ring: Type.Optional(
              Type.Array(E164, { maxItems: 10, description: 'ring these in order on an inbound call' }),
            ),
            ring_timeout_secs: Type.Optional(Type.Integer({ minimum: 5, maximum: 120, default: 20 })),
            mps: Type.Optional(
              Type.Integer({
                minimum: 1,
                maximum: 1000,
                description:
                  'at most this many messages a second from this number, across all workers (default: no limit)',
              }),
            ),
            record: Type.Optional(Type.Boolean({ description: 'record inbound calls once bridged (default false)' })),
            transcribe: Type.Optional(
              Type.Boolean({ description: 'transcribe recorded inbound calls when they end; implies record' }),
            ),
            tenant_id: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
            carrier: Type.Optional(
              Type.String({
                minLength: 1,
                maxLength: 64,
                description:
                  "the number's carrier: one of the deployment's configured carriers (422 carrier_not_configured); " +
                  'required when several are configured (422 carrier_required)',
              }),
            ),
          },
          { additionalProperties: false },
        ),
        response: {
          201: ok('The number, routing to this account', PhoneNumber),
          ...problems(404, 409),
          503: {
            description: 'The carrier could not be asked about the number; retry after Retry-After',
            content: { 'application/problem+json': { schema: Problem } },
          },
        },
      },
    },
    async (req, reply) => {
      const { accountId } = req.principal;
      // `!== undefined`, not truthiness: any string given must name one of the account's tenants (held by the
      // foreign key from here on: tenants are never deleted).
      if (req.body.tenant_id !== undefined && !(await tenantOfAccount(ctx.pool, accountId, req.body.tenant_id)))
        throw notFound('tenant');
      // A number belongs to one carrier: the only one configured, or the one named, which must be configured.
      const configured = configuredCarrierNames(ctx.carriers);
      if (req.body.carrier === undefined && configured.length > 1) {
        throw unprocessable(
          'carrier_required',
          `name the number's carrier: this deployment has several (${configured.join(', ')})`,
          'carrier',
        );
      }
      const carrier = req.body.carrier ?? configured[0] ?? ctx.carriers.keys().next().value!;
      const adapter = ctx.carriers.get(carrier);
      if (!adapter || !configured.includes(carrier)) {
        throw unprocessable(
          'carrier_not_configured',
          `no carrier named "${carrier}" is configured here (${configured.join(', ') || 'none'})`,
          'carrier',
        );
      }
      // The carrier is asked first, whoever holds the number here, and outside the transaction (no connection is
      // held while it answers): a claim of another account's number costs what a claim of an unknown one costs.
      const held = adapter.client ? await adapter.client.ownsNumber(req.body.number) : null;
      if (!held?.ok) {
        ctx.log.warn({ carrier, detail: held?.detail ?? 'no client configured' }, 'carrier inventory lookup failed');
        throw new ApiError(
          503,
          'carrier_unavailable',
          `${carrier} could not be asked whether it holds the number; retry shortly`,
          undefined,
          { 'retry-after': '5' },
        );
      }
      if (!held.owned) throw unavailable(req.body.number);
      const created = await createIdempotently(ctx.pool, req, accountId, async (tx) => {
        const n = await numberInsert(tx, {
          accountId,
          tenantId: req.body.tenant_id ?? null,
          carrier,
          number: req.body.number,
          inboundRing: req.body.inbound_ring ?? [],
          ringTimeoutSecs: req.body.ring_timeout_secs ?? 20,
          inboundRecord: req.body.record ?? false,
          inboundTranscribe: req.body.transcribe ?? false,
          mps: req.body.mps ?? null,
        });
        if (!n) {
          if (await numberHeldByAccount(tx, accountId, carrier, req.body.number)) {
            throw new ApiError(
              409,
              'number_exists',
              `${req.body.number} is already one of this account's numbers`,
              'number',
            );
          }
          throw unavailable(req.body.number);
        }
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
        await cursorOf(req.query.starting_after, (id) => numberOfAccount(ctx.pool, req.principal.accountId, id)),
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

  app.delete(
    '/phone_numbers/:id',
    {
      schema: {
        tags,
        operationId: 'releasePhoneNumber',
        summary: 'Release a number from the account',
        description:
          'Its SMS and calls stop routing to this account at once (the number stays in the carrier account). ' +
          '`409 number_in_use` while a call on it rings or talks, or a message from it waits to be sent.',
        params: Type.Object({ id: Type.String({ maxLength: 64 }) }),
        response: { 200: ok('Released', DeletedPhoneNumber), ...problems(409) },
      },
    },
    async (req) => {
      const released = await withTx(ctx.pool, (tx) => numberRelease(tx, req.principal.accountId, req.params.id));
      if (!released.applied && released.reason === 'not_found') throw notFound('phone number');
      if (!released.applied) {
        throw conflict(
          'number_in_use',
          `The number is still in use: ${released.calls} call(s) ringing or in progress, ${released.messages} ` +
            'message(s) waiting to be sent from it; release it once they are done (or cancel the scheduled ones)',
        );
      }
      return { id: released.number.id, deleted: true };
    },
  );
};
