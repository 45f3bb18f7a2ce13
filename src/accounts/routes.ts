// Customer API for tenants (sub-accounts) and the account's own API keys. Resources
// such as phone numbers may carry a tenant_id; messages and calls inherit their
// number's. A key's secret is in the response that made it (create, roll) and
// nowhere else: never in a list, never in a replayed create.

import { Type } from 'typebox';
import { withTx } from '../db/tx.js';
import { Nullable, named, Time } from '../api/fields.js';
import { createIdempotently, IdempotencyHeaders, sendCreated } from '../api/idempotency.js';
import { ok, problems } from '../api/openapi.js';
import { cursorOf, listOf, ListQuery, page } from '../api/pagination.js';
import { conflict, notFound } from '../api/problem.js';
import type { ApiRoutes } from '../api/server.js';
import { apiKeyCreate, apiKeyResource, apiKeyRevokeGuarded, apiKeyRoll, ROLL_OVERLAP_SECONDS } from './accounts.js';
import {
  apiKeyList,
  apiKeyLiveOfAccount,
  tenantInsert,
  tenantList,
  tenantOfAccount,
  type TenantRow,
} from './accounts.sql.js';

const Tenant = named(
  'Tenant',
  Type.Object({
    id: Type.String(),
    name: Type.String(),
    created_at: Type.String({ format: 'date-time' }),
  }),
);
const tenantResource = (t: TenantRow) => ({ id: t.id, name: t.name, created_at: t.created_at.toISOString() });

export const tenantRoutes: ApiRoutes = (app, ctx) => {
  const tags = ['Tenants'];
  app.post(
    '/tenants',
    {
      schema: {
        tags,
        operationId: 'createTenant',
        summary: 'Create a tenant (sub-account)',
        headers: IdempotencyHeaders,
        body: Type.Object({ name: Type.String({ minLength: 1, maxLength: 200 }) }, { additionalProperties: false }),
        response: { 201: ok('The tenant', Tenant), ...problems(409) },
      },
    },
    async (req, reply) => {
      const { accountId } = req.principal;
      const created = await createIdempotently(ctx.pool, req, accountId, async (tx) => ({
        status: 201,
        body: tenantResource(await tenantInsert(tx, accountId, req.body.name)),
      }));
      return sendCreated(reply, created);
    },
  );
  app.get(
    '/tenants',
    {
      schema: {
        tags,
        operationId: 'listTenants',
        summary: 'List tenants',
        querystring: ListQuery,
        response: { 200: ok('A page of tenants', listOf(Tenant)) },
      },
    },
    async (req) => {
      const rows = await tenantList(
        ctx.pool,
        req.principal.accountId,
        req.query.limit,
        await cursorOf(req.query.starting_after, (id) => tenantOfAccount(ctx.pool, req.principal.accountId, id)),
      );
      const p = page(rows, req.query.limit);
      return { data: p.data.map(tenantResource), has_more: p.has_more };
    },
  );
  app.get(
    '/tenants/:id',
    {
      schema: {
        tags,
        operationId: 'getTenant',
        summary: 'Get a tenant',
        params: Type.Object({ id: Type.String({ maxLength: 64 }) }),
        response: { 200: ok('The tenant', Tenant) },
      },
    },
    async (req) => {
      const t = await tenantOfAccount(ctx.pool, req.principal.accountId, req.params.id);
      if (!t) throw notFound('tenant');
      return tenantResource(t);
    },
  );
};

const ApiKey = named(
  'ApiKey',
  Type.Object({
    id: Type.String(),
    name: Nullable(Type.String()),
    created_at: Time,
    last_used_at: Nullable(Time),
    expires_at: Nullable(
      Type.String({ format: 'date-time', description: 'set by a roll: the key works until then; null: until revoked' }),
    ),
  }),
);

const ApiKeyWithSecret = named(
  'ApiKeyWithSecret',
  Type.Object({
    ...ApiKey.properties,
    secret: Type.Optional(
      Type.String({ description: 'hsk_…: the key itself, shown only in the response that made it' }),
    ),
    secret_omitted: Type.Optional(
      Type.String({ description: 'why `secret` is absent (a replayed request: the key is shown only once)' }),
    ),
  }),
);

const DeletedApiKey = named('DeletedApiKey', Type.Object({ id: Type.String(), deleted: Type.Boolean() }));

const SECRET_OMITTED = 'The key is shown only in the first response; create or roll a key to get a new one';

const KeyParams = Type.Object({ id: Type.String({ maxLength: 64 }) });

/** A body that is wholly optional may be absent: no body reads as `{}`. */
const absentBodyIsEmpty = async (req: { body: unknown }) => {
  req.body ??= {};
};

export const apiKeyRoutes: ApiRoutes = (app, ctx) => {
  const tags = ['API keys'];
  app.post(
    '/api_keys',
    {
      schema: {
        tags,
        operationId: 'createApiKey',
        summary: 'Create an API key (its secret is in this response only)',
        headers: IdempotencyHeaders,
        body: Type.Object(
          { name: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })) },
          { additionalProperties: false },
        ),
        response: { 201: ok('The key with its secret', ApiKeyWithSecret) },
      },
      preValidation: absentBodyIsEmpty,
    },
    async (req, reply) => {
      const { accountId } = req.principal;
      let secret: string | null = null;
      // What is kept for a replay of this request has no secret: it is shown once.
      const created = await createIdempotently(ctx.pool, req, accountId, async (tx) => {
        const made = await apiKeyCreate(tx, accountId, { name: req.body.name ?? null });
        secret = made.key;
        return { status: 201, body: { ...apiKeyResource(made.row), secret_omitted: SECRET_OMITTED } };
      });
      if (secret !== null && !created.replayed) {
        const { secret_omitted: _, ...rest } = created.body as Record<string, unknown>;
        return sendCreated(reply, { ...created, body: { ...rest, secret } });
      }
      return sendCreated(reply, created);
    },
  );

  app.get(
    '/api_keys',
    {
      schema: {
        tags,
        operationId: 'listApiKeys',
        summary: 'List the live API keys (never their secrets)',
        querystring: ListQuery,
        response: { 200: ok('A page of keys', listOf(ApiKey)) },
      },
    },
    async (req) => {
      const rows = await apiKeyList(
        ctx.pool,
        req.principal.accountId,
        req.query.limit,
        await cursorOf(req.query.starting_after, (id) =>
          apiKeyLiveOfAccount(ctx.pool, req.principal.accountId, id, new Date()),
        ),
        new Date(),
      );
      const p = page(rows, req.query.limit);
      return { data: p.data.map(apiKeyResource), has_more: p.has_more };
    },
  );

  app.get(
    '/api_keys/:id',
    {
      schema: {
        tags,
        operationId: 'getApiKey',
        summary: 'Get a live API key (never its secret)',
        params: KeyParams,
        response: { 200: ok('The key', ApiKey) },
      },
    },
    async (req) => {
      const k = await apiKeyLiveOfAccount(ctx.pool, req.principal.accountId, req.params.id, new Date());
      if (!k) throw notFound('API key');
      return apiKeyResource(k);
    },
  );

  app.delete(
    '/api_keys/:id',
    {
      schema: {
        tags,
        operationId: 'revokeApiKey',
        summary: 'Revoke an API key, at once, in every API process',
        description:
          'The account’s last live key without an expiry is revoked only with `force=true`: without a key the account ' +
          'cannot use the API until `handset accounts keys create` makes one.',
        params: KeyParams,
        querystring: Type.Object(
          {
            // Spelled out as the two words a query string carries, so it reads the same with or without type coercion.
            force: Type.Optional(
              Type.Union([Type.Literal('true'), Type.Literal('false')], {
                description: 'true: revoke it even when it is the last key that lasts',
              }),
            ),
          },
          { additionalProperties: false },
        ),
        response: { 200: ok('Revoked', DeletedApiKey), ...problems(409) },
      },
    },
    async (req) => {
      const result = await withTx(ctx.pool, (tx) =>
        apiKeyRevokeGuarded(tx, req.principal.accountId, req.params.id, {
          force: req.query.force === 'true',
          now: new Date(),
        }),
      );
      if (result.applied) ctx.apiKeys.changed(req.params.id);
      if (!result.applied && result.reason === 'not_found') throw notFound('API key');
      if (!result.applied) {
        throw conflict(
          'last_api_key',
          'This is the account’s last key that does not expire: revoking it leaves no way into the API. ' +
            'Create or roll another key first, or send force=true to revoke it anyway',
        );
      }
      return { id: req.params.id, deleted: true };
    },
  );

  app.post(
    '/api_keys/:id/roll',
    {
      schema: {
        tags,
        operationId: 'rollApiKey',
        summary: 'A new key in place of this one, which keeps working for an overlap (24 h by default)',
        params: KeyParams,
        body: Type.Object(
          {
            expires_in_seconds: Type.Optional(
              Type.Integer({
                minimum: 0,
                maximum: 30 * 86_400,
                default: ROLL_OVERLAP_SECONDS,
                description: 'how long the old key keeps working (0: it stops at once); at most 30 days',
              }),
            ),
          },
          { additionalProperties: false },
        ),
        response: { 201: ok('The new key with its secret', ApiKeyWithSecret) },
      },
      preValidation: absentBodyIsEmpty,
    },
    async (req, reply) => {
      const rolled = await withTx(ctx.pool, (tx) =>
        apiKeyRoll(tx, req.principal.accountId, req.params.id, {
          overlapSeconds: req.body.expires_in_seconds ?? ROLL_OVERLAP_SECONDS,
          now: new Date(),
        }),
      );
      if (!rolled) throw notFound('API key');
      ctx.apiKeys.changed(req.params.id);
      return reply.code(201).send({ ...apiKeyResource(rolled.created.row), secret: rolled.created.key });
    },
  );
};
