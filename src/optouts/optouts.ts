// The opt-out list as the rest of Handset uses it: what an inbound text's keyword
// asks for, opting a pair out or back in (each change announced once, in the
// caller's transaction, only when it changed the list), and the resource shape.

import type { Tx } from '../db/tx.js';
import { emit } from '../outbox/outbox.js';
import {
  type OptOutRow,
  type OptOutSource,
  optOutEndById,
  optOutEndForPair,
  optOutInsert,
  type Pair,
  pairLockExclusive,
} from './optouts.sql.js';

/** The words US carriers treat as an opt-out, an opt-in, or a request for help, when they are the whole text. */
export const KEYWORDS = {
  stop: ['STOP', 'STOPALL', 'UNSUBSCRIBE', 'CANCEL', 'END', 'QUIT', 'REVOKE', 'OPTOUT'],
  start: ['START', 'UNSTOP', 'YES'],
  help: ['HELP', 'INFO'],
} as const;
export type Keyword = keyof typeof KEYWORDS;

const KEYWORD_OF = new Map<string, Keyword>(
  (Object.entries(KEYWORDS) as [Keyword, readonly string[]][]).flatMap(([k, words]) => words.map((w) => [w, k])),
);

/** What an inbound text asks for, when its whole trimmed body is a keyword (any case); null otherwise. */
export const keywordOf = (text: string | null): Keyword | null =>
  text === null ? null : (KEYWORD_OF.get(text.trim().toUpperCase()) ?? null);

export function optOutResource(o: OptOutRow) {
  return {
    id: o.id,
    number: o.number,
    recipient: o.recipient,
    source: o.source,
    tenant_id: o.tenant_id,
    created_at: o.created_at.toISOString(),
    deleted_at: o.deleted_at?.toISOString() ?? null,
    sequence: o.sequence,
  };
}

/** Opts the pair out, with one opt_out.created; null (and no event) when it already was. */
export async function optOut(
  tx: Tx,
  o: Pair & { tenantId: string | null; source: OptOutSource },
  occurredAt: Date,
): Promise<OptOutRow | null> {
  await pairLockExclusive(tx, o);
  const row = await optOutInsert(tx, o);
  if (row) await announce(tx, 'opt_out.created', row, occurredAt);
  return row;
}

/** Opts the pair back in, with one opt_out.deleted; null (and no event) when it was not opted out. */
export async function optIn(tx: Tx, p: Pair, occurredAt: Date): Promise<OptOutRow | null> {
  await pairLockExclusive(tx, p);
  const row = await optOutEndForPair(tx, p);
  if (row) await announce(tx, 'opt_out.deleted', row, occurredAt);
  return row;
}

/**
 * Ends one of the account's opt-outs by id (the API's DELETE); null when it has
 * none active by that id. Without the pair's lock: a dispatcher that checks
 * meanwhile still sees the opt-out and refuses the send, which errs the safe way.
 */
export async function optInById(tx: Tx, accountId: string, id: string, occurredAt: Date): Promise<OptOutRow | null> {
  const row = await optOutEndById(tx, accountId, id);
  if (row) await announce(tx, 'opt_out.deleted', row, occurredAt);
  return row;
}

function announce(tx: Tx, type: 'opt_out.created' | 'opt_out.deleted', o: OptOutRow, occurredAt: Date) {
  return emit(tx, {
    accountId: o.account_id,
    tenantId: o.tenant_id,
    type,
    subjectId: o.id,
    data: optOutResource(o),
    occurredAt,
  });
}
