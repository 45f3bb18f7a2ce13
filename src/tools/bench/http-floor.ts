// Baseline H, run as its own process: ingest with nothing stored. The same
// server as `handset serve --roles ingest` (buildIngestServer: Fastify with its
// settings, the body reader, the signature check, the parse, the metrics), except
// that a verified event is answered "stored" on the next turn of the event loop
// instead of being written. Its CPU per request is the floor under ingest's CPU
// per stored webhook on this machine; what ingest spends above it is the store.
//
// Started by the bench (roles.ts) with TELNYX_PUBLIC_KEY and DATABASE_URL (for
// the operational routes only; nothing here writes); prints one JSON line with
// its URL when it listens, and stops on SIGTERM.

import { newId } from '../../db/ids.js';
import { createPool } from '../../db/pool.js';
import { telnyxAdapter } from '../../carrier/telnyx/adapter.js';
import type { StoreResult } from '../../carrier/events.sql.js';
import { buildIngestServer, type EventStore } from '../../ingest/server.js';
import { createLogger } from '../../telemetry/log.js';
import { Metrics } from '../../telemetry/metrics.js';

const publicKey = process.env['TELNYX_PUBLIC_KEY'];
const databaseUrl = process.env['DATABASE_URL'];
if (!publicKey || !databaseUrl) throw new Error('http-floor needs TELNYX_PUBLIC_KEY and DATABASE_URL');

const unwritten: EventStore = {
  waiting: 0,
  store: () => new Promise<StoreResult>((resolve) => setImmediate(() => resolve({ stored: true, id: newId('cev') }))),
};

const pool = createPool(databaseUrl, { max: 1, applicationName: 'handset-bench-floor' });
const adapter = telnyxAdapter({ publicKey });
const app = buildIngestServer({
  pool,
  carriers: new Map([[adapter.name, adapter]]),
  log: createLogger('warn'),
  metrics: new Metrics(),
  events: unwritten,
});
const url = await app.listen({ host: '127.0.0.1', port: 0 });
process.stdout.write(`${JSON.stringify({ msg: 'floor listening', url })}\n`);
process.once('SIGTERM', () => {
  void app
    .close()
    .then(() => pool.end())
    .then(() => process.exit(0));
});
