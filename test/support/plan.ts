// How many rows of a table one statement reads, by its plan as it ran: for the
// rule "reads its own rows, not the backlog", whatever the statistics say.

import type pg from 'pg';

type PlanNode = Record<string, unknown> & { Plans?: PlanNode[] };

/**
 * Runs `call` with a pool whose first statement is EXPLAIN ANALYZEd instead (it
 * answers no rows, and later statements are not run), and counts the rows of
 * `table` that statement's scans produced or filtered out, through any index.
 */
export async function rowsRead(pool: pg.Pool, table: string, call: (db: pg.Pool) => Promise<unknown>): Promise<number> {
  let plan: PlanNode | null = null;
  const explaining = {
    query: async (q: { text: string; values?: unknown[] }) => {
      if (!plan) {
        const r = await pool.query(`EXPLAIN (ANALYZE, FORMAT JSON) ${q.text}`, q.values);
        plan = (r.rows[0]['QUERY PLAN'] as { Plan: PlanNode }[])[0]!.Plan;
      }
      return { rows: [], rowCount: 0 };
    },
  } as unknown as pg.Pool;
  await call(explaining);
  let read = 0;
  const walk = (node: PlanNode) => {
    const ofTable = node['Relation Name'] === table || String(node['Index Name'] ?? '').startsWith(`${table}_`);
    if (ofTable) {
      const rows = (node['Actual Rows'] as number) + ((node['Rows Removed by Filter'] as number | undefined) ?? 0);
      read += rows * (node['Actual Loops'] as number);
    }
    for (const child of node.Plans ?? []) walk(child);
  };
  if (!plan) throw new Error('the call ran no statement');
  walk(plan);
  return read;
}
