// Translates PostgreSQL errors into the few facts callers act on, in one place.

interface PgError {
  code?: unknown;
  constraint?: unknown;
}

function sqlState(err: unknown): string | null {
  const code = (err as PgError | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : null;
}

/** The input itself is unacceptable (bad jsonb, \u0000 in text, too deep, index row too large). */
export function isBadInput(err: unknown): boolean {
  const state = sqlState(err);
  return state !== null && (state.startsWith('22') || state.startsWith('54'));
}

export function isUniqueViolation(err: unknown, constraint?: string): boolean {
  if (sqlState(err) !== '23505') return false;
  return constraint === undefined || (err as PgError).constraint === constraint;
}

export function isCheckViolation(err: unknown): boolean {
  return sqlState(err) === '23514';
}

// Connection exception, operator intervention (shutdown, cannot connect now), too many connections, a
// statement or lock wait cut off by the connection's statement_timeout or lock_timeout (query_canceled,
// lock_not_available), and a read-only transaction (25006: the connection landed on a standby, or on a
// primary being demoted, during a failover): the database is there but not writable, too slow or too busy
// right now, which a retry can outlast.
const UNAVAILABLE_STATES = /^(08...|57P0[1-3]|53300|57014|55P03|25006)$/;
const UNAVAILABLE_MESSAGES =
  /Connection terminated|connection timeout|timeout exceeded when trying to connect|ECONNREFUSED|ECONNRESET|EPIPE|ETIMEDOUT|EHOSTUNREACH|Client has encountered a connection error|Cannot use a pool after calling end|in a read-only transaction|during recovery/;

/**
 * The connection is on a node that cannot write (a standby, a demoted primary):
 * it must not go back to its pool, or every statement behind it fails the same way.
 */
export function isReadOnly(err: unknown): boolean {
  if (sqlState(err) === '25006') return true;
  const message = (err as { message?: unknown } | null)?.message;
  return typeof message === 'string' && /in a read-only transaction|during recovery/.test(message);
}

/**
 * The database could not be reached, the connection broke, or a statement ran
 * past its timeout: an expected condition during a failover, a restart, a
 * network blip or a long lock, answered with 503 and retried, never a crash or a 500.
 */
export function isUnavailable(err: unknown): boolean {
  const state = sqlState(err);
  if (state !== null) return UNAVAILABLE_STATES.test(state) || isReadOnly(err);
  const e = err as { message?: unknown; code?: unknown } | null;
  const text = `${typeof e?.code === 'string' ? e.code : ''} ${typeof e?.message === 'string' ? e.message : ''}`;
  return UNAVAILABLE_MESSAGES.test(text);
}

/**
 * Runs `fn` until it stops failing because the database is unavailable (a process
 * started while PostgreSQL restarts or fails over waits for it instead of dying);
 * any other error is thrown at once. `signal` ends the wait.
 */
export async function untilAvailable<T>(
  what: string,
  fn: () => Promise<T>,
  warn: (fields: object, msg: string) => void,
  signal?: AbortSignal,
): Promise<T> {
  let lastWarned = 0;
  for (let attempt = 0; ; attempt++) {
    try {
      return await fn();
    } catch (err) {
      if (!isUnavailable(err) || signal?.aborted) throw err;
      if (Date.now() - lastWarned > 5_000) {
        warn({ err: (err as Error).message, attempt }, `database unavailable; waiting to ${what}`);
        lastWarned = Date.now();
      }
      await new Promise((r) => setTimeout(r, Math.min(250 * 2 ** attempt, 5_000)));
    }
  }
}
