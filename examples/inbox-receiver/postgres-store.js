// @handset/inbox on postgres.js (the `postgres` package) instead of pg: the
// InboxStore seam is all a driver needs. The handler gets postgres.js's own
// transaction `sql`, so its writes commit with the remembered event id or not at all.
//
//   import postgres from 'postgres';
//   const sql = postgres(process.env.DATABASE_URL);
//   const inbox = createInbox({ store: postgresStore(sql), secret });
//   inbox.nodeHandler(async (event, sql) => { await sql`UPDATE …`; });

/** Types: postgres-store.d.ts beside this file. */
export function postgresStore(sql) {
  return {
    transaction(fn, options) {
      const run = (tx) => fn({ exec: async (text, params) => (await tx.unsafe(text, params)).count }, tx);
      return options?.isolation ? sql.begin(`isolation level ${options.isolation}`, run) : sql.begin(run);
    },
  };
}
