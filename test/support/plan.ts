// How many rows of a table one statement reads, by its plan as it ran: for the
// rule "reads its own rows, not the backlog", whatever the statistics say.

import type pg from 'pg';

type PlanNode = Record<string, unknown> & { Plans?: PlanNode[] };

/**
 * Runs `call` on one connection of `pool` and counts the rows of `table` its
 * statements' scans produced or filtered out, through any index, by the plans
 * they ran with: those of the functions they call included (onOneConnection).
 */
export async function rowsRead(
  pool: pg.Pool,
  table: string,
  call: (db: pg.PoolClient) => Promise<unknown>,
): Promise<number> {
  return onOneConnection(pool, (client, watch) => watch(table, () => call(client)));
}

/**
 * Runs `use` on `table`'s statistics as they are now: ANALYZEd first, and kept so
 * until `use` ends (autovacuum off meanwhile: an ANALYZE midway would re-plan with
 * statistics the test did not choose). For "taken before a burst".
 */
export async function onStatisticsOfNow<T>(pool: pg.Pool, table: string, use: () => Promise<T>): Promise<T> {
  await pool.query(`ALTER TABLE ${table} SET (autovacuum_enabled = false)`);
  try {
    await pool.query(`ANALYZE ${table}`);
    return await use();
  } finally {
    await pool.query(`ALTER TABLE ${table} RESET (autovacuum_enabled)`);
  }
}

/**
 * Runs `call` with a pool whose first statement is EXPLAIN ANALYZEd instead (it
 * answers no rows, and later statements are not run), and counts the buffer pages
 * it touched (in shared buffers or read in): dead index entries, which no row count
 * shows, cost their pages here.
 */
export async function pagesRead(pool: pg.Pool, call: (db: pg.Pool) => Promise<unknown>): Promise<number> {
  const plan = await explainFirst(pool, 'BUFFERS', call);
  return (plan['Shared Hit Blocks'] as number) + (plan['Shared Read Blocks'] as number);
}

/**
 * The same for the WAL records the first statement wrote (it runs, and commits on
 * its own): a row locked before it is changed costs a record of its own.
 */
export async function walRecords(pool: pg.Pool, call: (db: pg.Pool) => Promise<unknown>): Promise<number> {
  return (await explainFirst(pool, 'WAL', call))['WAL Records'] as number;
}

/** The top plan node of `call`'s first statement, run under EXPLAIN (ANALYZE, `option`). */
async function explainFirst(
  pool: pg.Pool,
  option: 'BUFFERS' | 'WAL',
  call: (db: pg.Pool) => Promise<unknown>,
): Promise<PlanNode> {
  let plan: PlanNode | null = null;
  const explaining = {
    query: async (q: { text: string; values?: unknown[] }) => {
      if (plan === null) {
        const r = await pool.query(`EXPLAIN (ANALYZE, ${option}, FORMAT JSON) ${q.text}`, q.values);
        plan = (r.rows[0]['QUERY PLAN'] as { Plan: PlanNode }[])[0]!.Plan;
      }
      return { rows: [], rowCount: 0 };
    },
  } as unknown as pg.Pool;
  await call(explaining);
  if (plan === null) throw new Error('the call ran no statement');
  return plan;
}

/** The rows of `table` a plan's scans produced or filtered out, through any index. */
function rowsOf(plan: PlanNode, table: string): number {
  let read = 0;
  const walk = (node: PlanNode) => {
    const ofTable = node['Relation Name'] === table || String(node['Index Name'] ?? '').startsWith(`${table}_`);
    if (ofTable) {
      const rows = (node['Actual Rows'] as number) + ((node['Rows Removed by Filter'] as number | undefined) ?? 0);
      read += rows * (node['Actual Loops'] as number);
    }
    for (const child of node.Plans ?? []) walk(child);
  };
  walk(plan);
  return read;
}

/**
 * Runs `use` on one connection of `pool`; its `watch(table, call)` counts the
 * rows of `table` read by every statement `call` runs on that connection, and by
 * the statements of the functions those call, by the plans they actually ran
 * with (auto_explain, sent back as notices). So a
 * plan the connection kept from earlier runs of a prepared statement is the one
 * measured: for the rule "a plan made on a small table still reads its own rows
 * once the table grew".
 */
export async function onOneConnection<T>(
  pool: pg.Pool,
  use: (client: pg.PoolClient, watch: (table: string, call: () => Promise<unknown>) => Promise<number>) => Promise<T>,
): Promise<T> {
  const client = await pool.connect();
  const plans: PlanNode[] = [];
  const onNotice = (n: { message?: string }) => {
    const text = n.message ?? '';
    const at = text.indexOf('{');
    if (text.startsWith('duration:') && at >= 0) plans.push((JSON.parse(text.slice(at)) as { Plan: PlanNode }).Plan);
  };
  client.on('notice', onNotice);
  const watch = async (table: string, call: () => Promise<unknown>) => {
    await client.query(`LOAD 'auto_explain'`);
    await client.query(`SET auto_explain.log_min_duration = 0; SET auto_explain.log_analyze = on;
                        SET auto_explain.log_format = json; SET auto_explain.log_level = notice;
                        SET auto_explain.log_nested_statements = on`);
    plans.length = 0;
    try {
      await call();
    } finally {
      await client.query(`SET auto_explain.log_min_duration = -1`);
    }
    // Notices arrive before their statement's answer; the SET's own plan is not logged.
    return plans.reduce((sum, plan) => sum + rowsOf(plan, table), 0);
  };
  try {
    return await use(client, watch);
  } finally {
    client.off('notice', onNotice);
    client.release(true); // its settings and kept plans go with it
  }
}
