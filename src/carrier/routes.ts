// Customer API for the deployment's carriers: which ones it sends through, what
// each carries, and how each is doing now (health.ts: up, down after refused
// requests, or being probed), so a dashboard can say why messages failed over.

import { Type } from 'typebox';
import { named, Nullable, Time } from '../api/fields.js';
import { ok } from '../api/openapi.js';
import type { ApiRoutes } from '../api/server.js';
import { CARRIER_STATES, carrierHealthAll } from './health.sql.js';

const Carrier = named(
  'Carrier',
  Type.Object({
    name: Type.String({ description: 'as numbers and messages name it' }),
    carries: Type.Array(Type.Enum(['messages', 'calls'])),
    status: Type.Enum([...CARRIER_STATES], {
      description:
        'up; down: its recent requests certainly did not reach it, and none is made until it is probed; probing: one request is trying it',
    }),
    refusals: Type.Integer({ description: 'requests in a row it certainly did not take' }),
    since: Nullable(Time),
    last_refusal: Nullable(Type.String()),
  }),
);

export const carrierRoutes: ApiRoutes = (app, ctx) => {
  app.get(
    '/carriers',
    {
      schema: {
        tags: ['Carriers'],
        operationId: 'listCarriers',
        summary: "The deployment's carriers and their health",
        // Not a paginated list: a deployment has a handful of carriers, all shown at once.
        response: { 200: ok('Every configured carrier', Type.Object({ data: Type.Array(Carrier) })) },
      },
    },
    async () => {
      const health = new Map((await carrierHealthAll(ctx.pool)).map((h) => [h.carrier, h]));
      const data = [...ctx.carriers.values()]
        .filter((a) => a.client)
        .map((a) => {
          const h = health.get(a.name);
          return {
            name: a.name,
            carries: a.carriesCalls ? (['messages', 'calls'] as const) : (['messages'] as const),
            status: h?.state ?? 'up',
            refusals: h?.refusals ?? 0,
            since: h ? h.changed_at.toISOString() : null,
            last_refusal: h?.last_refusal ?? null,
          };
        });
      return { data: data.map((d) => ({ ...d, carries: [...d.carries] })) };
    },
  );
};
