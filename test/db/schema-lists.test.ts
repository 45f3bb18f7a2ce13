// The migrated database held to the TypeScript lists. Every enumerated CHECK
// (`col IN (…)`) equals, as a set, the `as const` list that owns it, and every
// `*_TABLE_COLUMNS` export of a src/**/*.sql.ts module names exactly its table's
// columns: a migration that adds a status or a column fails here until the list
// and the row type say the same.

import { readdir } from 'node:fs/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { USAGE_KINDS } from '../../src/billing/usage.sql.js';
import { CALL_DIRECTIONS, CALL_STATUSES, LEG_STATUSES } from '../../src/calls/calls.sql.js';
import { ATTEMPT_TRIGGERS, DELIVERY_STATUSES } from '../../src/delivery/deliveries.sql.js';
import {
  ENCODINGS,
  HISTORY_EFFECTS,
  HISTORY_SOURCES,
  MESSAGE_DIRECTIONS,
  MESSAGE_STATUSES,
  SEND_OUTCOMES,
} from '../../src/messages/messages.sql.js';
import { CARRIER_STATES } from '../../src/carrier/health.sql.js';
import { RECOVERY_STATUSES } from '../../src/delivery/recoveries.sql.js';
import { OPT_OUT_SOURCES } from '../../src/optouts/optouts.sql.js';
import { AUDIO_STATUSES, TRANSCRIPTION_STATUSES } from '../../src/recordings/recordings.sql.js';
import { createTestDatabase, type TestDatabase } from '../support/db.js';

/** `table.column` → the list that owns the column's values. */
const LIST_OF: Record<string, readonly string[]> = {
  'messages.status': MESSAGE_STATUSES,
  'messages.direction': MESSAGE_DIRECTIONS,
  'messages.encoding': ENCODINGS,
  'message_status_history.source': HISTORY_SOURCES,
  'message_status_history.effect': HISTORY_EFFECTS,
  'calls.status': CALL_STATUSES,
  'calls.direction': CALL_DIRECTIONS,
  'call_legs.status': LEG_STATUSES,
  'webhook_deliveries.status': DELIVERY_STATUSES,
  'webhook_attempts.trigger': ATTEMPT_TRIGGERS,
  'usage_records.kind': USAGE_KINDS,
  'webhook_recoveries.status': RECOVERY_STATUSES,
  'opt_outs.source': OPT_OUT_SOURCES,
  'recordings.audio_status': AUDIO_STATUSES,
  'recordings.transcription_status': TRANSCRIPTION_STATUSES,
  'message_sends.outcome': SEND_OUTCOMES,
  'carrier_health.state': CARRIER_STATES,
};

interface EnumeratedCheck {
  constraint: string;
  /** `table.column` */
  column: string;
  values: string[];
}

// How PostgreSQL prints `col IN ('a', 'b')` back, and `col = 'a'` (a list of one).
const ANY_ARRAY = /^CHECK \(\("?(\w+)"? = ANY \(ARRAY\[(.*)\]\)\)\)$/;
const EQUALS = /^CHECK \(\("?(\w+)"? = ('(?:[^']|'')*'::text)\)\)$/;
const LITERAL = /'((?:[^']|'')*)'::text/g;

/** The enumerated CHECKs of the schema, and those that enumerate in a shape this test cannot read. */
async function enumeratedChecks(db: TestDatabase): Promise<{ checks: EnumeratedCheck[]; unreadable: string[] }> {
  const { rows } = await db.pool.query<{ constraint: string; table: string; def: string }>(
    `SELECT c.conname AS constraint, cl.relname AS table, pg_get_constraintdef(c.oid) AS def
       FROM pg_constraint c JOIN pg_class cl ON cl.oid = c.conrelid JOIN pg_namespace n ON n.oid = cl.relnamespace
      WHERE c.contype = 'c' AND n.nspname = current_schema()
      ORDER BY cl.relname, c.conname`,
  );
  const checks: EnumeratedCheck[] = [];
  const unreadable: string[] = [];
  for (const r of rows) {
    const m = ANY_ARRAY.exec(r.def) ?? EQUALS.exec(r.def);
    if (m && m[2]!.replace(LITERAL, '').replaceAll(', ', '') === '') {
      const values = [...m[2]!.matchAll(LITERAL)].map((v) => v[1]!.replaceAll("''", "'"));
      checks.push({ constraint: r.constraint, column: `${r.table}.${m[1]}`, values });
    } else if (/= ANY \(|\bIN \(|= '/.test(r.def)) {
      unreadable.push(`${r.table}.${r.constraint}: ${r.def}`);
    }
  }
  return { checks, unreadable };
}

/** Every `*_TABLE_COLUMNS` export of the src/**\/*.sql.ts modules, found by scanning, not by name. */
async function columnListExports(): Promise<{ owner: string; table: string; columns: string[] }[]> {
  const src = fileURLToPath(new URL('../../src/', import.meta.url));
  const files = (await readdir(src, { recursive: true })).filter((f) => f.endsWith('.sql.ts')).sort();
  const found: { owner: string; table: string; columns: string[] }[] = [];
  for (const file of files) {
    const mod: Record<string, unknown> = await import(pathToFileURL(`${src}${file}`).href);
    for (const [name, value] of Object.entries(mod)) {
      if (!name.endsWith('_TABLE_COLUMNS')) continue;
      for (const [table, list] of Object.entries(value as Record<string, string>)) {
        found.push({ owner: `${file}:${name}`, table, columns: list.split(',').map((c) => c.trim()) });
      }
    }
  }
  return found;
}

const columnLists = await columnListExports();
const sorted = (xs: readonly string[]) => [...xs].sort();

let db: TestDatabase;
let enumerated: Awaited<ReturnType<typeof enumeratedChecks>>;
beforeAll(async () => {
  db = await createTestDatabase();
  enumerated = await enumeratedChecks(db);
});
afterAll(async () => {
  await db.drop();
});

describe('every enumerated CHECK is a TypeScript list', () => {
  it('each enumerated CHECK in the schema has a list that owns it', () => {
    const unowned = enumerated.checks.filter((c) => !(c.column in LIST_OF)).map((c) => `${c.column} (${c.constraint})`);
    expect(unowned, 'CHECKs with no as-const list: add the list in the column owner').toEqual([]);
    expect(enumerated.unreadable, 'CHECKs that enumerate in a shape this test cannot read').toEqual([]);
  });

  it.each(Object.entries(LIST_OF))('%s holds exactly the values of its list', (column, list) => {
    const checks = enumerated.checks.filter((c) => c.column === column);
    expect(
      checks.map((c) => c.constraint),
      `one CHECK on ${column}`,
    ).toHaveLength(1);
    expect(sorted(checks[0]!.values)).toEqual(sorted([...new Set(list)]));
    expect(new Set(list).size, 'the list repeats a value').toBe(list.length);
  });
});

describe('every *_TABLE_COLUMNS list names exactly its table', () => {
  it('the scan finds the column lists and each table has one owner', () => {
    const owners = new Set(columnLists.map((l) => l.owner.split(':')[1]));
    for (const name of [
      'CALL_TABLE_COLUMNS',
      'MESSAGE_TABLE_COLUMNS',
      'NUMBER_TABLE_COLUMNS',
      'EVENT_TABLE_COLUMNS',
      'DELIVERY_TABLE_COLUMNS',
    ]) {
      expect(owners, name).toContain(name);
    }
    const tables = columnLists.map((l) => l.table);
    expect(
      tables.filter((t, i) => tables.indexOf(t) !== i),
      'tables listed by two owners',
    ).toEqual([]);
  });

  it.each(columnLists.map((l) => [`${l.owner} names exactly the columns of ${l.table}`, l] as const))(
    '%s',
    async (_, { table, columns }) => {
      const { rows } = await db.pool.query<{ column_name: string }>(
        `SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1`,
        [table],
      );
      expect(rows.length, `table ${table} exists`).toBeGreaterThan(0);
      expect(new Set(columns).size, 'the list repeats a column').toBe(columns.length);
      expect(sorted(columns)).toEqual(sorted(rows.map((r) => r.column_name)));
    },
  );
});
