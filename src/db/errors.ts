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
