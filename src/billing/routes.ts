// Customer API for usage: quantities per kind over a period (in total, or per
// hour, day, week or month), and what the ledger billed for one message or call.

import { Type } from 'typebox';
import { listOf } from '../api/pagination.js';
import { notFound, unprocessable } from '../api/problem.js';
import type { ApiRoutes } from '../api/server.js';
import { callOfAccount } from '../calls/calls.sql.js';
import type { Db } from '../db/pool.js';
import { messageOfAccount } from '../messages/messages.sql.js';
import { USAGE_INTERVALS, usageOverTime, usageRecordsOf, usageSummary } from './usage.sql.js';

const Quantities = Type.Array(Type.Object({ kind: Type.String(), quantity: Type.Integer() }));
const BucketStart = Type.String({ format: 'date-time', description: "the bucket's UTC boundary" });

const UsageRecord = Type.Object({
  id: Type.String(),
  kind: Type.String(),
  quantity: Type.Integer(),
  source_id: Type.String({ description: 'the message or call billed' }),
  tenant_id: Type.Union([Type.String(), Type.Null()]),
  occurred_at: Type.String({ format: 'date-time' }),
});

interface Billed {
  path: string;
  noun: string;
  find: (db: Db, accountId: string, id: string) => Promise<unknown>;
}

/** Resources the ledger bills, each with how to find one of the caller's; a new billable resource is one line. */
const BILLED = [
  { path: '/messages/:id/usage_records', noun: 'message', find: messageOfAccount },
  { path: '/calls/:id/usage_records', noun: 'call', find: callOfAccount },
] as const satisfies readonly Billed[];

export const usageRoutes: ApiRoutes = (app, ctx) => {
  const tags = ['Usage'];
  app.get(
    '/usage',
    {
      schema: {
        tags,
        summary: 'Usage per kind in [from, to); defaults to the current calendar month (UTC)',
        description:
          'With `interval`, `buckets` also gives the quantities per UTC hour, day, week (from Monday) or month, ' +
          'oldest first; buckets without usage are left out.',
        querystring: Type.Object(
          {
            from: Type.Optional(Type.String({ format: 'date-time' })),
            to: Type.Optional(Type.String({ format: 'date-time' })),
            tenant_id: Type.Optional(Type.String({ maxLength: 64 })),
            interval: Type.Optional(Type.Enum([...USAGE_INTERVALS])),
          },
          { additionalProperties: false },
        ),
        response: {
          200: Type.Object({
            from: Type.String({ format: 'date-time' }),
            to: Type.String({ format: 'date-time' }),
            data: Quantities,
            interval: Type.Optional(Type.String()),
            buckets: Type.Optional(Type.Array(Type.Object({ start: BucketStart, data: Quantities }))),
          }),
        },
      },
    },
    async (req) => {
      const now = new Date();
      const from = req.query.from
        ? new Date(req.query.from)
        : new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
      const to = req.query.to
        ? new Date(req.query.to)
        : new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1));
      if (to <= from) throw unprocessable('invalid_period', 'to must be after from', 'to');
      const { accountId } = req.principal;
      const tenantId = req.query.tenant_id ?? null;
      const data = await usageSummary(ctx.pool, accountId, from, to, tenantId);
      const period = { from: from.toISOString(), to: to.toISOString(), data };
      const interval = req.query.interval;
      if (!interval) return period;
      const buckets = new Map<string, { start: string; data: { kind: string; quantity: number }[] }>();
      for (const row of await usageOverTime(ctx.pool, accountId, from, to, tenantId, interval)) {
        const start = row.start.toISOString();
        const bucket = buckets.get(start) ?? { start, data: [] };
        bucket.data.push({ kind: row.kind, quantity: row.quantity });
        buckets.set(start, bucket);
      }
      return { ...period, interval, buckets: [...buckets.values()] };
    },
  );

  for (const billed of BILLED) {
    app.get(
      billed.path,
      {
        schema: {
          tags,
          summary: `What the ledger billed for this ${billed.noun}, oldest first`,
          params: Type.Object({ id: Type.String({ maxLength: 64 }) }),
          response: { 200: listOf(UsageRecord) },
        },
      },
      async (req) => {
        const { accountId } = req.principal;
        if (!(await billed.find(ctx.pool, accountId, req.params.id))) throw notFound(billed.noun);
        const rows = await usageRecordsOf(ctx.pool, accountId, req.params.id);
        return { data: rows.map((r) => ({ ...r, occurred_at: r.occurred_at.toISOString() })), has_more: false };
      },
    );
  }
};
