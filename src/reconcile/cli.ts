// `handset reconcile [--dry-run]`: one reconciliation pass from the command line,
// the same pass the worker runs every HANDSET_RECONCILE_INTERVAL. --dry-run lists
// what it would ask the carrier, and why, and asks nothing.

import { parseArgs } from 'node:util';
import { carriers } from '../carrier/registry.js';
import { ConfigError, type Config } from '../config.js';
import { createPool } from '../db/pool.js';
import type { Logger } from '../telemetry/log.js';
import { reconcileCandidates, reconcilePass, type ReconcileDeps } from './reconcile.js';

export const RECONCILE_USAGE = `usage: handset reconcile [--dry-run] [--json]

Asks the carrier about every call leg, inbound caller and message still waiting
for a carrier event past its bound, and applies what it answers through the same
guarded transitions as a webhook (the worker does this every HANDSET_RECONCILE_INTERVAL).
  --dry-run   list what would be asked, and why; ask nothing
  --json      print the result as JSON
Needs DATABASE_URL and TELNYX_API_KEY (next to a running handset dev, its own).
`;

export async function runReconcileCommand(
  args: string[],
  config: Config,
  databaseUrl: string,
  log: Logger,
  out: (line: string) => void,
): Promise<number> {
  const { values } = parseArgs({
    args,
    options: { 'dry-run': { type: 'boolean' }, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
  });
  if (values.help) {
    out(RECONCILE_USAGE);
    return 0;
  }
  if (!config.telnyx.apiKey) throw new ConfigError('TELNYX_API_KEY', 'is required by handset reconcile');
  const pool = createPool(databaseUrl, { max: 4, applicationName: 'handset-reconcile', log });
  try {
    const deps: ReconcileDeps = {
      pool,
      carriers: carriers(config),
      log,
      intervalMs: config.reconcileIntervalMs,
      afterMs: config.reconcileAfterMs,
      messageAfterMs: config.reconcileMessageAfterMs,
    };
    if (values['dry-run']) {
      const candidates = await reconcileCandidates(deps, new Date());
      if (values.json) out(JSON.stringify({ would_ask: candidates }, null, 2));
      else if (candidates.length === 0) out('nothing is waiting past its bound: nothing to ask');
      else {
        out(`would ask the carrier about ${candidates.length}:`);
        for (const c of candidates) out(`  ${c.why}`);
      }
      return 0;
    }
    const tally = await reconcilePass(deps);
    out(
      values.json
        ? JSON.stringify(tally)
        : Object.entries(tally)
            .map(([k, v]) => `${k} ${v}`)
            .join(', '),
    );
    return 0;
  } finally {
    await pool.end();
  }
}
