// `handset reconcile [--dry-run] [--json]`: one reconciliation pass from the command
// line, the same pass the worker runs every HANDSET_RECONCILE_INTERVAL. --dry-run
// lists what it would ask the carrier, and why, and asks nothing.

import { Command } from 'commander';
import { EXIT } from '../cli/command.js';
import { ConfigError, type Config } from '../config.js';
import type { Logger } from '../telemetry/log.js';
import type { ReconcileDeps } from './reconcile.js';

export interface ReconcileFlags {
  dryRun?: boolean;
  json?: boolean;
}

/** `handset reconcile`: its flags (no action: the caller attaches one). */
export function reconcileCommand(): Command {
  return new Command('reconcile')
    .description('ask the carrier about whatever waits past its bound for a carrier event')
    .option('--dry-run', 'list what would be asked, and why; ask nothing')
    .option('--json', 'print the result as JSON')
    .addHelpText(
      'after',
      [
        '',
        'Applies what the carrier answers through the same guarded transitions as a webhook (the worker does this',
        'every HANDSET_RECONCILE_INTERVAL). Needs DATABASE_URL and TELNYX_API_KEY; next to a running handset dev,',
        'it uses dev’s database and simulator.',
      ].join('\n'),
    );
}

export async function runReconcile(
  flags: ReconcileFlags,
  config: Config,
  databaseUrl: string,
  log: Logger,
  out: (line: string) => void,
): Promise<number> {
  if (!config.telnyx.apiKey) throw new ConfigError('TELNYX_API_KEY', 'is required by handset reconcile');
  // Loaded here, not with the command: `handset --help` need not load the carriers and the job runner.
  const [{ carriers }, { createPool }, { reconcileCandidates, reconcilePass }] = await Promise.all([
    import('../carrier/registry.js'),
    import('../db/pool.js'),
    import('./reconcile.js'),
  ]);
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
    if (flags.dryRun) {
      const candidates = await reconcileCandidates(deps, new Date());
      if (flags.json) out(JSON.stringify({ would_ask: candidates }, null, 2));
      else if (candidates.length === 0) out('nothing is waiting past its bound: nothing to ask');
      else {
        out(`would ask the carrier about ${candidates.length}:`);
        for (const c of candidates) out(`  ${c.why}`);
      }
      return EXIT.ok;
    }
    const tally = await reconcilePass(deps);
    out(
      flags.json
        ? JSON.stringify(tally)
        : Object.entries(tally)
            .map(([k, v]) => `${k} ${v}`)
            .join(', '),
    );
    return EXIT.ok;
  } finally {
    await pool.end();
  }
}
