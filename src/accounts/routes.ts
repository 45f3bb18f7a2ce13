// Customer API for tenants (sub-accounts). Resources such as phone numbers may
// carry a tenant_id; messages and calls inherit their number's.

import { Type } from 'typebox';
import { named } from '../api/fields.js';
import { createIdempotently, IdempotencyHeaders, sendCreated } from '../api/idempotency.js';
import { ok, problems } from '../api/openapi.js';
import { ListQuery, listOf, page } from '../api/pagination.js';
import { notFound } from '../api/problem.js';
import type { ApiRoutes } from '../api/server.js';
import { tenantInsert, tenantList, tenantOfAccount, type TenantRow } from './accounts.sql.js';

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
        req.query.starting_after ?? null,
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
