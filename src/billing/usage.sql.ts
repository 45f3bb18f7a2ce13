// SQL for usage_records, the ledger. bill() is called inside the transaction of
// the guarded transition that made something billable (a message dispatched or
// received, a call completed), so a refused transition bills nothing and a
// duplicate carrier event cannot bill twice.

import type { Db } from '../db/pool.js';
import type { Tx } from '../db/tx.js';

export const USAGE_KINDS = [
  'sms_segment_outbound',
  'sms_segment_inbound',
  'mms_outbound',
  'mms_inbound',
  'call_minute',
  'recording_minute',
  'transcription_minute',
] as const;
export type UsageKind = (typeof USAGE_KINDS)[number];

export async function bill(
  tx: Tx,
  u: {
    accountId: string;
    tenantId: string | null;
    kind: UsageKind;
    quantity: number;
    sourceId: string;
    occurredAt: Date;
  },
): Promise<void> {
  await tx.query({
    name: 'usage_bill',
    text: `INSERT INTO usage_records (account_id, tenant_id, kind, quantity, source_id, occurred_at)
           VALUES ($1, $2, $3, $4, $5, $6)`,
    values: [u.accountId, u.tenantId, u.kind, u.quantity, u.sourceId, u.occurredAt],
  });
}

export async function usageSummary(
  db: Db,
  accountId: string,
  from: Date,
  to: Date,
  tenantId: string | null,
): Promise<{ kind: UsageKind; quantity: number }[]> {
  const { rows } = await db.query<{ kind: UsageKind; quantity: number }>({
    name: 'usage_summary',
    text: `SELECT kind, sum(quantity)::int AS quantity FROM usage_records
            WHERE account_id = $1 AND occurred_at >= $2 AND occurred_at < $3 AND ($4::text IS NULL OR tenant_id = $4)
            GROUP BY kind ORDER BY kind`,
    values: [accountId, from, to, tenantId],
  });
  return rows;
}

/** Bucket widths for usage over time; buckets are aligned to UTC calendar boundaries (weeks start on Monday). */
export const USAGE_INTERVALS = ['hour', 'day', 'week', 'month'] as const;
export type UsageInterval = (typeof USAGE_INTERVALS)[number];

/**
 * Quantities per bucket and kind in [from, to), oldest bucket first. Only buckets
 * with usage are returned: the number of rows is bounded by the ledger, not by how
 * many hours the period spans.
 */
export async function usageOverTime(
  db: Db,
  accountId: string,
  from: Date,
  to: Date,
  tenantId: string | null,
  interval: UsageInterval,
): Promise<{ start: Date; kind: UsageKind; quantity: number }[]> {
  const { rows } = await db.query<{ start: Date; kind: UsageKind; quantity: number }>({
    name: 'usage_over_time',
    text: `SELECT date_trunc($5, occurred_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS start,
                  kind, sum(quantity)::int AS quantity
             FROM usage_records
            WHERE account_id = $1 AND occurred_at >= $2 AND occurred_at < $3 AND ($4::text IS NULL OR tenant_id = $4)
            GROUP BY 1, kind ORDER BY 1, kind`,
    values: [accountId, from, to, tenantId, interval],
  });
  return rows;
}

export interface UsageRecordRow {
  id: string;
  tenant_id: string | null;
  kind: UsageKind;
  quantity: number;
  source_id: string;
  occurred_at: Date;
}

/** What the ledger billed for one resource (a message, a call), in the order it was billed. */
export async function usageRecordsOf(db: Db, accountId: string, sourceId: string): Promise<UsageRecordRow[]> {
  const { rows } = await db.query<UsageRecordRow>({
    name: 'usage_records_of',
    text: `SELECT id, tenant_id, kind, quantity, source_id, occurred_at FROM usage_records
            WHERE source_id = $1 AND account_id = $2 ORDER BY occurred_at, id`,
    values: [sourceId, accountId],
  });
  return rows;
}
