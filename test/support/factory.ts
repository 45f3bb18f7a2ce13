// Row factories for tests: rows in any state, written straight with SQL inside a
// transaction the test always rolls back, so a guard gets a unit test of its own
// without the simulator, a worker or any cleanup. Each builder takes overrides,
// fills in what the row's state implies (a sent message has its carrier id, an
// ended leg its ended_at), creates the parents it was not given, and returns the
// row as its owner's SQL types it.

import type pg from 'pg';
import { type AccountRow, ACCOUNT_TABLE_COLUMNS, type TenantRow } from '../../src/accounts/accounts.sql.js';
import {
  CALL_TABLE_COLUMNS,
  type CallRow,
  type CallStatus,
  type LegRow,
  type LegStatus,
} from '../../src/calls/calls.sql.js';
import type { CarrierEventRow } from '../../src/carrier/events.sql.js';
import { type Tx, withTx } from '../../src/db/tx.js';
import { DELIVERY_TABLE_COLUMNS, type DeliveryRow, type DeliveryStatus } from '../../src/delivery/deliveries.sql.js';
import { ENDPOINT_TABLE_COLUMNS, type EndpointRow } from '../../src/delivery/endpoints.sql.js';
import { MESSAGE_TABLE_COLUMNS, type MessageRow, type MessageStatus } from '../../src/messages/messages.sql.js';
import { NUMBER_TABLE_COLUMNS, type PhoneNumberRow } from '../../src/numbers/numbers.sql.js';
import { EVENT_TABLE_COLUMNS, type OutboundEventRow } from '../../src/outbox/outbox.sql.js';
import { eventually } from './db.js';

/** The moment factory rows happened at; tests pass times relative to it. */
export const T0 = new Date('2026-03-02T10:00:00.000Z');
export const later = (seconds: number, from = T0) => new Date(from.getTime() + seconds * 1000);

const rollback = new Error('rolled back by inRolledBackTx');

/**
 * Runs fn in a transaction that is rolled back however fn ends, and returns what
 * fn returned. It is withTx's own transaction, so code under test that opens one
 * nests inside it as a savepoint.
 */
export async function inRolledBackTx<T>(pool: pg.Pool, fn: (tx: Tx) => Promise<T>): Promise<T> {
  let result: T | undefined;
  try {
    await withTx(pool, async (tx) => {
      result = await fn(tx);
      throw rollback;
    });
  } catch (err) {
    if (err !== rollback) throw err;
  }
  return result as T;
}

/**
 * Two transitions racing over the same row: `first` runs in a transaction left
 * open, `second` in another that then waits on the first's row lock; once it is
 * seen waiting, the first commits. Answers both results, the second's as the
 * statement saw the row after the first's commit.
 */
export async function racing<A, B>(
  pool: pg.Pool,
  first: (tx: Tx) => Promise<A>,
  second: (tx: Tx) => Promise<B>,
): Promise<[A, B]> {
  const [a, b] = [await pool.connect(), await pool.connect()];
  try {
    await a.query('BEGIN');
    const firstResult = await first(a as unknown as Tx);
    const bPid = (await b.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    await b.query('BEGIN');
    const secondResult = second(b as unknown as Tx);
    secondResult.catch(() => undefined); // awaited below, after the first commits
    await eventually(async () => {
      const { rows } = await pool.query('SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted', [bPid]);
      return rows.length > 0;
    });
    await a.query('COMMIT');
    const result = await secondResult;
    await b.query('COMMIT');
    return [firstResult, result];
  } catch (err) {
    await a.query('ROLLBACK').catch(() => undefined);
    await b.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    a.release();
    b.release();
  }
}

/** The states of a list other than those a transition starts from: the ones it must refuse. */
export function allBut<T extends string, A extends T>(list: readonly T[], ...allowed: A[]): Exclude<T, A>[] {
  return list.filter((s): s is Exclude<T, A> => !(allowed as T[]).includes(s));
}

/** The row as the database holds it now, with the same columns as `row`. */
export async function reread<T extends { id: string }>(tx: Tx, table: string, row: T): Promise<T> {
  const { rows } = await tx.query<T>(`SELECT ${Object.keys(row).join(', ')} FROM ${table} WHERE id = $1`, [row.id]);
  return rows[0]!;
}

let serial = 0;
/** A value no other factory row in this process has (carrier ids, references). */
export const unique = (prefix: string) => `${prefix}-${process.pid}-${++serial}`;
const e164 = () => `+1555${String(++serial % 10_000_000).padStart(7, '0')}`;

async function insert<T extends pg.QueryResultRow>(
  tx: Tx,
  table: string,
  returning: string,
  row: Record<string, unknown>,
): Promise<T> {
  const columns = Object.keys(row).filter((c) => row[c] !== undefined);
  const { rows } = await tx.query<T>(
    `INSERT INTO ${table} (${columns.join(', ')}) VALUES (${columns.map((_, i) => `$${i + 1}`).join(', ')})
     RETURNING ${returning}`,
    columns.map((c) => row[c]),
  );
  return rows[0]!;
}

async function accountOf(tx: Tx, table: string, id: string): Promise<string> {
  const { rows } = await tx.query<{ account_id: string }>(`SELECT account_id FROM ${table} WHERE id = $1`, [id]);
  return rows[0]!.account_id;
}

export function account(tx: Tx, o: Partial<AccountRow> = {}): Promise<AccountRow> {
  return insert(tx, 'accounts', ACCOUNT_TABLE_COLUMNS.accounts, { name: 'factory', ...o });
}

export async function tenant(tx: Tx, o: Partial<TenantRow> = {}): Promise<TenantRow> {
  const account_id = o.account_id ?? (await account(tx)).id;
  return insert(tx, 'tenants', ACCOUNT_TABLE_COLUMNS.tenants, { name: 'factory tenant', ...o, account_id });
}

export async function phoneNumber(tx: Tx, o: Partial<PhoneNumberRow> = {}): Promise<PhoneNumberRow> {
  const account_id = o.account_id ?? (await account(tx)).id;
  return insert(tx, 'phone_numbers', NUMBER_TABLE_COLUMNS.phone_numbers, {
    carrier: 'telnyx',
    number: e164(),
    ...o,
    account_id,
  });
}

/** What each status implies about the rest of a message. */
const MESSAGE_STATE: Record<MessageStatus, () => Partial<MessageRow>> = {
  scheduled: () => ({ send_at: later(3600) }),
  queued: () => ({}),
  sent: () => ({ carrier_message_id: unique('msg'), sent_at: T0 }),
  delivered: () => ({ carrier_message_id: unique('msg'), sent_at: T0, completed_at: later(5) }),
  failed: () => ({ carrier_message_id: unique('msg'), sent_at: T0, completed_at: later(5), error_code: '40300' }),
  canceled: () => ({ send_at: later(3600), completed_at: T0 }),
  received: () => ({ direction: 'inbound', carrier_message_id: unique('msg'), created_at: T0, completed_at: T0 }),
};

/** An outbound message (status `queued` unless told), or an inbound one when the status is `received`. */
export async function message(tx: Tx, o: Partial<MessageRow> = {}): Promise<MessageRow> {
  const status = o.status ?? 'queued';
  const account_id = o.account_id ?? (await account(tx)).id;
  return insert(tx, 'messages', MESSAGE_TABLE_COLUMNS.messages, {
    direction: 'outbound',
    from_number: '+13125550142',
    to_number: '+15555550100',
    body: 'Hello from the factory',
    encoding: 'GSM-7',
    segments: 1,
    carrier: 'telnyx',
    ...MESSAGE_STATE[status](),
    ...o,
    status,
    account_id,
  });
}

/** What each status implies about the rest of a call. */
const CALL_STATE: Record<CallStatus, () => Partial<CallRow>> = {
  ringing: () => ({}),
  in_progress: () => ({ answered_at: T0 }),
  completed: () => ({ answered_at: T0, ended_at: later(65), duration_seconds: 65 }),
  missed: () => ({ ended_at: later(20), duration_seconds: 0 }),
};

/** A call (outbound and `ringing` unless told); an inbound one has a caller_ref. Its cursor is at 1. */
export async function call(tx: Tx, o: Partial<CallRow> = {}): Promise<CallRow> {
  const status = o.status ?? 'ringing';
  const direction = o.direction ?? 'outbound';
  const account_id = o.account_id ?? (await account(tx)).id;
  return insert(tx, 'calls', CALL_TABLE_COLUMNS.calls, {
    from_number: '+13125550142',
    number: '+13125550142',
    carrier: 'telnyx',
    ring_plan: { targets: ['+15555550110', '+15555550111', '+15555550113'], timeout: 20, next: 1 },
    caller_ref: direction === 'inbound' ? unique('caller') : null,
    created_at: T0,
    ...CALL_STATE[status](),
    ...o,
    status,
    direction,
    account_id,
  });
}

/** What each status implies about the rest of a leg. */
const LEG_STATE: Record<LegStatus, () => Partial<LegRow>> = {
  dialing: () => ({}),
  ringing: () => ({ carrier_ref: unique('leg'), dialed_at: T0 }),
  answered: () => ({ carrier_ref: unique('leg'), dialed_at: T0, answered_at: later(3) }),
  completed: () => ({
    carrier_ref: unique('leg'),
    dialed_at: T0,
    answered_at: later(3),
    ended_at: later(65),
    hangup_cause: 'normal_clearing',
  }),
  no_answer: () => ({ carrier_ref: unique('leg'), dialed_at: T0, ended_at: later(20), hangup_cause: 'timeout' }),
  canceled: () => ({ ended_at: T0, hangup_cause: 'call_over' }),
  failed: () => ({ ended_at: T0, hangup_cause: 'dial_refused' }),
};

/** A leg (`dialing` unless told) at the next free position of its call (a ringing one, made if not given). */
export async function leg(tx: Tx, o: Partial<LegRow> = {}): Promise<LegRow> {
  const status = o.status ?? 'dialing';
  const call_id = o.call_id ?? (await call(tx)).id;
  const { rows } = await tx.query<{ position: number }>(
    'SELECT coalesce(max(position) + 1, 0) AS position FROM call_legs WHERE call_id = $1',
    [call_id],
  );
  return insert(tx, 'call_legs', CALL_TABLE_COLUMNS.call_legs, {
    carrier: 'telnyx',
    position: rows[0]!.position,
    to_number: '+15555550110',
    created_at: T0,
    ...LEG_STATE[status](),
    ...o,
    status,
    call_id,
  });
}

/** A stored carrier webhook, not yet processed unless given processed_at. */
export function carrierEvent(tx: Tx, o: Partial<CarrierEventRow> = {}): Promise<CarrierEventRow> {
  return insert(tx, 'carrier_events', '*', {
    carrier: 'telnyx',
    carrier_event_id: unique('cev'),
    event_type: 'message.sent',
    payload: { data: { event_type: 'message.sent' } },
    ...o,
  });
}

/** The states an endpoint can be in, as its columns say them. */
export const ENDPOINT_STATES = ['enabled', 'failing', 'disabled', 'deleted'] as const;
export type EndpointState = (typeof ENDPOINT_STATES)[number];
const ENDPOINT_STATE: Record<EndpointState, () => Partial<EndpointRow>> = {
  enabled: () => ({}),
  failing: () => ({ consecutive_failures: 3, timing_out: true }),
  disabled: () => ({
    enabled: false,
    disabled_reason: 'consecutive_failures',
    disabled_at: T0,
    consecutive_failures: 100,
  }),
  deleted: () => ({ enabled: false, deleted_at: T0 }),
};

/** A webhook endpoint subscribed to every type, `enabled` unless told another state. */
export async function endpoint(tx: Tx, o: Partial<EndpointRow> & { state?: EndpointState } = {}): Promise<EndpointRow> {
  const { state = 'enabled', ...columns } = o;
  const account_id = o.account_id ?? (await account(tx)).id;
  return insert(tx, 'webhook_endpoints', ENDPOINT_TABLE_COLUMNS.webhook_endpoints, {
    url: 'https://receiver.example/hooks',
    ...ENDPOINT_STATE[state](),
    ...columns,
    account_id,
  });
}

export async function outboundEvent(tx: Tx, o: Partial<OutboundEventRow> = {}): Promise<OutboundEventRow> {
  const account_id = o.account_id ?? (await account(tx)).id;
  return insert(tx, 'outbound_events', EVENT_TABLE_COLUMNS.outbound_events, {
    type: 'message.sent',
    subject_id: unique('msg'),
    data: {},
    occurred_at: T0,
    ...o,
    account_id,
  });
}

/** What each status implies about the rest of a delivery. */
const DELIVERY_STATE: Record<DeliveryStatus, () => Partial<DeliveryRow>> = {
  pending: () => ({ next_attempt_at: T0 }),
  succeeded: () => ({ attempts: 1 }),
  failed: () => ({ attempts: 9 }),
  skipped: () => ({}),
};

/** A delivery (`pending` unless told) of an event to an endpoint of one account, each made if not given. */
export async function delivery(tx: Tx, o: Partial<DeliveryRow> = {}): Promise<DeliveryRow> {
  const status = o.status ?? 'pending';
  const account_id = o.endpoint_id
    ? await accountOf(tx, 'webhook_endpoints', o.endpoint_id)
    : o.event_id
      ? await accountOf(tx, 'outbound_events', o.event_id)
      : (await account(tx)).id;
  const endpoint_id = o.endpoint_id ?? (await endpoint(tx, { account_id })).id;
  const event_id = o.event_id ?? (await outboundEvent(tx, { account_id })).id;
  return insert(tx, 'webhook_deliveries', DELIVERY_TABLE_COLUMNS.webhook_deliveries, {
    ...DELIVERY_STATE[status](),
    ...o,
    status,
    endpoint_id,
    event_id,
  });
}
