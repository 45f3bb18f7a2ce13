// Carrier events about messages. A delivery receipt asks "is there anything left
// to do to this message?" and lets the row answer: the terminal transition is one
// guarded UPDATE, and the history row, the customer event (and nothing else) follow
// only when it changed the row. A receipt that arrives before the dispatcher has
// stamped the carrier id waits (NotReadyError) for the not-ready policy; one that
// still matches no message then is not ours (another application on the same
// carrier account) and is recorded as such; one that hands back our own message id
// (Twilio's StatusCallback marker) about a message still queued waits for as long
// as the dispatcher takes to learn the send it is about. An inbound SMS is inserted once per
// carrier message id, whatever event id it came under; when its whole text is a
// STOP or START keyword, the opt-out list changes in the same transaction, only
// for the insert that applied, so a replayed or re-sent STOP changes nothing.

import { bill } from '../billing/usage.sql.js';
import type { HandlerRegistry } from '../carrier/process.js';
import { NotReadyError } from '../carrier/process.js';
import { together } from '../db/tx.js';
import { numberAtCarrier } from '../numbers/numbers.sql.js';
import { keywordOf, optIn, optOut } from '../optouts/optouts.js';
import { emit } from '../outbox/outbox.js';
import { messageResource } from './messages.js';
import {
  historyRecord,
  messageByCarrierId,
  messageById,
  messageFinalize,
  messageInsertInbound,
} from './messages.sql.js';
import { segmentsOf } from './segments.js';

export const messageHandlers: HandlerRegistry = {
  'message.receipt': async (tx, ev, ctx) => {
    const history = {
      source: ev.source === 'reconciliation' ? ('reconciliation' as const) : ('carrier' as const),
      carrier: ctx.carrier,
      carrierEventId: ctx.eventRowId,
      carrierStatus: ev.carrierStatus,
      errorCode: ev.errorCode,
      occurredAt: ev.occurredAt,
    };
    const terminal = ev.status === 'delivered' || ev.status === 'failed' ? ev.status : null;
    const finalize = (to: 'delivered' | 'failed') =>
      messageFinalize(
        tx,
        ctx.carrier,
        ev.carrierMessageId,
        to,
        to === 'failed' ? (ev.errorCode ?? ev.carrierStatus) : null,
        ev.occurredAt,
      );
    // The common case first, in one statement: the receipt that finalizes its message.
    let done = terminal ? await finalize(terminal) : null;
    // Read after the guarded UPDATE: it waited for any transition holding the row, and this sees what won.
    let m = done ? null : await messageByCarrierId(tx, ctx.carrier, ev.carrierMessageId);
    if (terminal && !done && m?.status === 'sent') {
      // Each statement reads what was committed when it began: the dispatcher stamped the
      // carrier id after the UPDATE looked and before this read. The UPDATE sees it now.
      done = await finalize(terminal);
      if (!done) m = await messageByCarrierId(tx, ctx.carrier, ev.carrierMessageId);
    }
    if (!done) {
      if (!m) {
        const ours = ev.ourMessageId ? await messageById(tx, ev.ourMessageId) : null;
        if (ours?.status === 'queued' && ours.carrier === ctx.carrier) {
          // The carrier says this send is ours; the dispatcher has not learned so yet (its answer was lost or is late).
          throw new NotReadyError(
            `${ev.ourMessageId} is still learning its ${ctx.carrier} id (${ev.carrierMessageId})`,
          );
        }
        if (!ctx.waitedOut) throw new NotReadyError(`no message with ${ctx.carrier} id ${ev.carrierMessageId} yet`);
        return { outcome: 'rejected', reason: `no message has ${ctx.carrier} id ${ev.carrierMessageId}` };
      }
      if (!terminal) {
        // sent / queued / sending / delivery_unconfirmed: worth knowing, never a second message.sent
        await historyRecord(tx, { ...history, messageId: m.id, status: m.status, effect: 'informational' });
        return { outcome: 'ignored', reason: `${ev.carrierStatus} changes nothing` };
      }
      await historyRecord(tx, {
        ...history,
        messageId: m.id,
        status: terminal,
        effect: 'refused',
        note: `message already ${m.status}`,
      });
      return { outcome: 'ignored', reason: `message already ${m.status}` };
    }
    // What the transition earned, in one round trip: its history and its customer event.
    await together(
      tx,
      () => historyRecord(tx, { ...history, messageId: done.id, status: done.status, effect: 'applied' }),
      () =>
        emit(tx, {
          accountId: done.account_id,
          tenantId: done.tenant_id,
          type: done.status === 'delivered' ? 'message.delivered' : 'message.failed',
          subjectId: done.id,
          data: messageResource(done),
          occurredAt: ev.occurredAt,
        }),
    );
    return { outcome: 'applied' };
  },

  'message.received': async (tx, ev, ctx) => {
    const number = await numberAtCarrier(tx, ctx.carrier, ev.to);
    if (!number) return { outcome: 'rejected', reason: `no account owns ${ev.to} at ${ctx.carrier}` };
    const { encoding, segments } = segmentsOf(ev.text, ev.mediaUrls);
    const m = await messageInsertInbound(tx, {
      accountId: number.account_id,
      tenantId: number.tenant_id,
      from: ev.from,
      to: ev.to,
      body: ev.text || null,
      mediaUrls: ev.mediaUrls,
      encoding,
      segments,
      carrier: ctx.carrier,
      carrierMessageId: ev.carrierMessageId,
      receivedAt: ev.occurredAt,
    });
    if (!m) return { outcome: 'ignored', reason: 'this SMS is already a message' };
    await bill(tx, {
      accountId: m.account_id,
      tenantId: m.tenant_id,
      kind: encoding === 'MMS' ? 'mms_inbound' : 'sms_segment_inbound',
      quantity: segments,
      sourceId: m.id,
      occurredAt: ev.occurredAt,
    });
    await historyRecord(tx, {
      messageId: m.id,
      source: 'carrier',
      carrier: ctx.carrier,
      carrierEventId: ctx.eventRowId,
      status: 'received',
      effect: 'applied',
      occurredAt: ev.occurredAt,
    });
    await emit(tx, {
      accountId: m.account_id,
      tenantId: m.tenant_id,
      type: 'message.received',
      subjectId: m.id,
      data: messageResource(m),
      occurredAt: ev.occurredAt,
    });
    // The sender opts out of (or back in to) messages from the number they texted; HELP is only the message.
    const keyword = keywordOf(m.body);
    const pair = { accountId: m.account_id, number: m.to_number, recipient: m.from_number };
    if (keyword === 'stop') await optOut(tx, { ...pair, tenantId: m.tenant_id, source: 'keyword' }, ev.occurredAt);
    if (keyword === 'start') await optIn(tx, pair, ev.occurredAt);
    return { outcome: 'applied' };
  },
};
