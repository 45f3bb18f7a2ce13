// Customer API for usage: quantities per kind over a period (in total, or per
// hour, day, week or month), and what the ledger billed for one message or call.

import { DAY_OR_INSTANT, instantOf } from '../api/input.js';
import { Type } from 'typebox';
import { named } from '../api/fields.js';
import { ok } from '../api/openapi.js';
import { listOf } from '../api/pagination.js';
import { notFound, unprocessable } from '../api/problem.js';
import type { ApiRoutes } from '../api/server.js';
import { callOfAccount } from '../calls/calls.sql.js';
import type { Db } from '../db/pool.js';
import { messageOfAccount } from '../messages/messages.sql.js';
import {
  USAGE_INTERVALS,
  USAGE_KINDS,
  type UsageKind as UsageKindName,
  usageOverTime,
  usageRecordsOf,
  usageSummary,
} from './usage.sql.js';

const UsageKind = named('UsageKind', Type.Enum([...USAGE_KINDS]));
const UsageInterval = named('UsageInterval', Type.Enum([...USAGE_INTERVALS]));
const Quantities = Type.Array(named('UsageQuantity', Type.Object({ kind: UsageKind, quantity: Type.Integer() })));
const BucketStart = Type.String({ format: 'date-time', description: "the bucket's UTC boundary" });

const UsageRecord = named(
  'UsageRecord',
  Type.Object({
    id: Type.String(),
    kind: UsageKind,
    quantity: Type.Integer(),
    source_id: Type.String({ description: 'the message or call billed' }),
    tenant_id: Type.Union([Type.String(), Type.Null()]),
    occurred_at: Type.String({ format: 'date-time' }),
  }),
);

const Usage = named(
  'Usage',
  Type.Object({
    from: Type.String({ format: 'date-time' }),
    to: Type.String({ format: 'date-time' }),
    data: Quantities,
    interval: Type.Optional(UsageInterval),
    buckets: Type.Optional(Type.Array(Type.Object({ start: BucketStart, data: Quantities }))),
  }),
);

interface Billed {
  path: string;
  operationId: string;
  noun: string;
  find: (db: Db, accountId: string, id: string) => Promise<unknown>;
}

/** Resources the ledger bills, each with how to find one of the caller's; a new billable resource is one line. */
const BILLED = [
  {
    path: '/messages/:id/usage_records',
    operationId: 'listMessageUsageRecords',
    noun: 'message',
    find: messageOfAccount,
  },
  { path: '/calls/:id/usage_records', operationId: 'listCallUsageRecords', noun: 'call', find: callOfAccount },
] as const satisfies readonly Billed[];

export const usageRoutes: ApiRoutes = (app, ctx) => {
  const tags = ['Usage'];
  app.get(
    '/usage',
    {
      schema: {
        tags,
        operationId: 'getUsage',
        summary: 'Usage per kind in [from, to); defaults to the current calendar month (UTC)',
        description:
          'With `interval`, `buckets` also gives the quantities per UTC hour, day, week (from Monday) or month, ' +
          'oldest first; buckets without usage are left out.',
        querystring: Type.Object(
          {
            from: Type.Optional(
              Type.String({
                format: DAY_OR_INSTANT,
                description: 'an RFC 3339 date-time, or a day (YYYY-MM-DD, UTC): from its start',
                examples: ['2026-12-01'],
              }),
            ),
            to: Type.Optional(
              Type.String({
                format: DAY_OR_INSTANT,
                description: 'an RFC 3339 date-time (excluded), or a day (YYYY-MM-DD, UTC): up to its end, included',
                examples: ['2026-12-31'],
              }),
            ),
            tenant_id: Type.Optional(Type.String({ maxLength: 64 })),
            interval: Type.Optional(UsageInterval),
          },
          { additionalProperties: false },
        ),
        response: { 200: ok('Quantities per kind over the period (and per bucket with interval)', Usage) },
      },
    },
    async (req) => {
      const now = new Date();
      // The schema has checked both read as instants.
      const from = req.query.from
        ? instantOf(req.query.from, 'start')!
        : new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
      const to = req.query.to
        ? instantOf(req.query.to, 'end')!
        : new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1));
      if (to <= from) throw unprocessable('invalid_period', 'to must be after from', 'to');
      const { accountId } = req.principal;
      const tenantId = req.query.tenant_id ?? null;
      const data = await usageSummary(ctx.pool, accountId, from, to, tenantId);
      const period = { from: from.toISOString(), to: to.toISOString(), data };
      const interval = req.query.interval;
      if (!interval) return period;
      const buckets = new Map<string, { start: string; data: { kind: UsageKindName; quantity: number }[] }>();
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
          operationId: billed.operationId,
          summary: `What the ledger billed for this ${billed.noun}, oldest first`,
          params: Type.Object({ id: Type.String({ maxLength: 64 }) }),
          response: { 200: ok(`The ${billed.noun}'s usage records`, listOf(UsageRecord)) },
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
