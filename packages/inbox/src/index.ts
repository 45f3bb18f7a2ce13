// @handset/inbox: Handset's webhooks, verified and handled exactly once per event
// id inside your own PostgreSQL transaction.

export {
  createInbox,
  RESULTS,
  type Handler,
  type Inbox,
  type InboxOptions,
  type Ordering,
  type Outcome,
  type Result,
} from './inbox.js';
export type { HandsetEvent, InboxEvent } from './event.js';
export {
  AbortedTransactionError,
  type ClientOf,
  pgStore,
  type InboxStore,
  type InboxTx,
  type Isolation,
  type PgClient,
  type PgPool,
  type TransactionOptions,
} from './store.js';
export type { FetchHandler, NodeHandler } from './http.js';
export type { HeaderBag, RawBody } from './verify.js';
