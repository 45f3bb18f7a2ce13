// Customer API for usage: quantities per kind over a period, from the ledger.

import { Type } from 'typebox';
import { unprocessable } from '../api/problem.js';
import type { ApiRoutes } from '../api/server.js';
import { usageSummary } from './usage.js';

export const usageRoutes: ApiRoutes = (app, ctx) => {
  app.get(
    '/usage',
    {
      schema: {
        tags: ['Usage'],
        summary: 'Usage per kind in [from, to); defaults to the current calendar month (UTC)',
        querystring: Type.Object(
          {
            from: Type.Optional(Type.String({ format: 'date-time' })),
            to: Type.Optional(Type.String({ format: 'date-time' })),
            tenant_id: Type.Optional(Type.String({ maxLength: 64 })),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({
            from: Type.String({ format: 'date-time' }),
            to: Type.String({ format: 'date-time' }),
            data: Type.Array(Type.Object({ kind: Type.String(), quantity: Type.Integer() })),
          }),
        },
      },
    },
    async (req) => {
      const now = new Date();
      const from = req.query.from ? new Date(req.query.from) : new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
      const to = req.query.to ? new Date(req.query.to) : new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1));
      if (to <= from) throw unprocessable('invalid_period', 'to must be after from', 'to');
      const data = await usageSummary(ctx.pool, req.principal.accountId, from, to, req.query.tenant_id ?? null);
      return { from: from.toISOString(), to: to.toISOString(), data };
    },
  );
};
