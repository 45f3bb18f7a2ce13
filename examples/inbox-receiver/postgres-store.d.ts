import type { InboxStore } from '@handset/inbox';
import type { Sql, TransactionSql } from 'postgres';

/** An InboxStore on postgres.js: each delivery in `sql.begin()`, the handler given its transaction `sql`. */
export function postgresStore(sql: Sql): InboxStore<TransactionSql>;
