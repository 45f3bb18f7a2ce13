// Operational routes shared by both HTTP roles: liveness, readiness (the database
// answers) and Prometheus metrics (behind HANDSET_METRICS_TOKEN when it is set).

import type { FastifyInstance } from 'fastify';
import type pg from 'pg';
import type { Metrics } from './metrics.js';

export function registerOperationalRoutes(app: FastifyInstance, deps: { pool: pg.Pool; metrics: Metrics }): void {
  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/readyz', async (_req, reply) => {
    try {
      await deps.pool.query('SELECT 1');
      return { status: 'ready' };
    } catch {
      return reply.code(503).send({ status: 'unavailable', detail: 'database unreachable' });
    }
  });
  app.get('/metrics', async (req, reply) => {
    if (!deps.metrics.mayScrape(req.headers.authorization)) {
      reply.header('www-authenticate', 'Bearer');
      return reply.code(401).send({ error: 'unauthorized', detail: 'GET /metrics needs its Bearer token' });
    }
    reply.header('content-type', deps.metrics.registry.contentType);
    return deps.metrics.registry.metrics();
  });
}
