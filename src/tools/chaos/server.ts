// The PostgreSQL server a fault run makes its databases on: the one given, or an
// embedded one of the run's own in a temporary directory (its removal queued
// with the run's other cleanups), so a run never touches anyone's data.

import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startEmbeddedPostgres } from '../../db/embedded.js';
import type { Logger } from '../../telemetry/log.js';

export async function runServer(
  given: string | null,
  opts: { prefix: string; maxConnections: number; log: Logger; cleanups: (() => Promise<unknown>)[] },
): Promise<string> {
  if (given) return given;
  const dir = await mkdtemp(path.join(tmpdir(), `${opts.prefix}-`));
  const embedded = await startEmbeddedPostgres({
    stateDir: dir,
    log: opts.log,
    durable: false,
    maxConnections: opts.maxConnections,
  });
  opts.cleanups.push(() => rm(dir, { recursive: true, force: true }), embedded.stop);
  return embedded.url;
}
