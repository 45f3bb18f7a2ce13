// The inbox's two tables and every statement on them: the remembered event ids
// and, per subject, the highest sequence handled. Table names come from the
// caller, checked and quoted once here; values are always parameters.

export interface Statements {
  /** Creates both tables if missing; serialised by an advisory lock, so concurrent runs do not race. */
  migrate: string[];
  /**
   * One round trip for the delivery's arrival: remembers the event id ($1, its
   * type $2) and, only when that inserted, advances its subject ($4) to sequence
   * $5 with the guarded upsert (applied only above the highest handled so far).
   * Rows returned: 0 = the id was remembered already (a duplicate); 1 = new, not
   * advanced (stale, or no subject and sequence given); 2 = new and advanced.
   * When another transaction holds the same id (or subject) uncommitted, it waits
   * for that one to end, at most the lock timeout $3, set in the same statement
   * before its inserts can wait.
   */
  arrive: string;
  /** Forgets at most $2 ids received more than $1 seconds ago, oldest first; rows affected = how many. */
  prune: string;
}

/** How many ids one prune statement deletes; prune repeats it until none is left. */
export const PRUNE_BATCH = 5000;

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_$]*$/;
const SUBJECTS_SUFFIX = '_subjects';
const INDEX_SUFFIX = '_received_at_idx';

/** `handset_inbox` or `schema.handset_inbox`: the inbox table; its subjects table is `<name>_subjects` beside it. */
export function statements(table: string): Statements {
  const parts = table.split('.');
  const name = parts.at(-1)!;
  if (
    parts.length > 2 ||
    !parts.every((p) => IDENTIFIER.test(p) && p.length <= 63) ||
    name.length + INDEX_SUFFIX.length > 63
  ) {
    throw new TypeError(
      `table: expected a table name, optionally schema-qualified (letters, digits, _ and $; at most ${63 - INDEX_SUFFIX.length} characters), got ${JSON.stringify(table)}`,
    );
  }
  const quote = (id: string) => `"${id}"`;
  const qualified = (n: string) => [...parts.slice(0, -1), n].map(quote).join('.');
  const inbox = qualified(name);
  const subjects = qualified(name + SUBJECTS_SUFFIX);
  return {
    migrate: [
      // One lock for every inbox migration in the database: CREATE … IF NOT EXISTS
      // run concurrently can still collide on the catalog's unique indexes.
      `SELECT pg_advisory_xact_lock(hashtext('handset-inbox-migrate'))`,
      `CREATE TABLE IF NOT EXISTS ${inbox} (
         event_id text PRIMARY KEY,
         event_type text NOT NULL,
         received_at timestamptz NOT NULL DEFAULT now()
       )`,
      `CREATE INDEX IF NOT EXISTS ${quote(name + INDEX_SUFFIX)} ON ${inbox} (received_at)`,
      `CREATE TABLE IF NOT EXISTS ${subjects} (
         subject text PRIMARY KEY,
         sequence bigint NOT NULL,
         updated_at timestamptz NOT NULL DEFAULT now()
       )`,
    ],
    arrive: `WITH timeout AS (SELECT set_config('lock_timeout', $3, true)),
      remembered AS (
        INSERT INTO ${inbox} (event_id, event_type) SELECT $1, $2 FROM timeout
        ON CONFLICT (event_id) DO NOTHING
        RETURNING 1),
      advanced AS (
        INSERT INTO ${subjects} AS s (subject, sequence)
        SELECT $4::text, $5::bigint FROM remembered WHERE $4::text IS NOT NULL
        ON CONFLICT (subject) DO UPDATE SET sequence = EXCLUDED.sequence, updated_at = now()
        WHERE s.sequence < EXCLUDED.sequence
        RETURNING 1)
      SELECT 1 FROM remembered UNION ALL SELECT 1 FROM advanced`,
    prune: `DELETE FROM ${inbox} WHERE event_id IN (
        SELECT event_id FROM ${inbox} WHERE received_at < now() - make_interval(secs => $1)
        ORDER BY received_at LIMIT $2)`,
  };
}
