// Preloaded (`node --import`) into a role that serves no HTTP (the worker): its
// own process's prom-client default metrics (heap, event-loop delay…) on a
// loopback port, so the soak reads a worker's figures the way it reads the API's
// and ingest's GET /metrics. Does nothing unless SOAK_PROBE_PORT is set.

import http from 'node:http';
import { Registry, collectDefaultMetrics } from 'prom-client';

const port = Number(process.env.SOAK_PROBE_PORT ?? 0);
if (port > 0) {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const server = http.createServer((_req, res) => {
    void registry.metrics().then((text) => res.writeHead(200, { 'content-type': registry.contentType }).end(text));
  });
  // Never what keeps the process alive: a graceful stop ends it as it would without the probe.
  server.listen(port, '127.0.0.1').unref();
}
