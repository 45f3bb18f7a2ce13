// Simulated Telnyx messaging: accepts POST /v2/messages (validation, persona
// refusals, Telnyx's OutboundMessagePayload answer), then plays the recipient persona's
// receipts (message.sent, message.finalized) as webhooks; receives inbound SMS
// (message.received). The message-level rumours live here: a contradicting
// `delivery_failed` after `delivered` (contradictionRate), and receipts fired and
// answered before the send itself is answered (earlyReceiptRate), which makes the
// receipt race the sender's own bookkeeping exactly as a fast real carrier can.
//
// GET /v2/messages/{id} answers the message as the carrier knows it at that
// moment: to[0].status, errors, sent_at and completed_at move when each receipt
// happens, whether its webhook is delivered, held or lost; a contradiction is a
// rumour about the message and moves nothing.

import { randomUUID } from 'node:crypto';
import type { Account } from './account.js';
import {
  deliveryError,
  messageEvents,
  outboundMessageResource,
  type FinalStatus,
  type MessageRecord,
} from './messaging-events.js';
import { isBlank, isBody, isE164, isRefusal, optionalString, optionalUrl, SimInputError, type Body } from './fields.js';
import { SMS_FINALIZED_AFTER_MS, SMS_SENT_AFTER_MS, type ResolvedPersona } from './personas.js';
import { refuse, type Outcome, type Refusal } from './refusals.js';
import { priceOf, segmentsOf } from './segments.js';
import { NO_POLICY, type DeliveryPolicy } from './webhooks.js';

/** Simulated ms between a delivered receipt and the contradiction that follows it. */
const CONTRADICTION_AFTER_MS = 500;
const VALIDITY_MS = 3_600_000;
const MAX_TEXT_LENGTH = 10_000;
const MAX_MEDIA = 10;

const SHORT_CODE = /^\d{5,6}$/;
const ALPHANUMERIC_SENDER = /^(?=.*[A-Za-z])[A-Za-z0-9 ]{1,11}$/;

interface SimMessage {
  record: MessageRecord;
  /** The message's simulated timeline (scheduler.timeline()). */
  clock: () => number;
  /** The URLs from the send request; the profile URL is read when each webhook goes out. */
  webhookUrl: string | null;
  webhookFailoverUrl: string | null;
  useProfileWebhooks: boolean;
  /** What the persona at the far end does to its webhooks (lose, hold). */
  policy: DeliveryPolicy;
}

export interface InboundSms {
  from: string;
  to: string;
  text?: string;
  media_urls?: string[];
  /** Where to send message.received instead of the profile URL. */
  webhook_url?: string;
}

// The carrier's own opt-out handling (Telnyx's defaults): an inbound text that is
// one of these words, whatever its case, creates or removes a block rule, and a
// send to a blocked pair is refused with 40300. Telnyx keeps block rules per
// messaging profile; the simulator keeps them per number, the pair Handset's list
// is kept by. Its words are Telnyx's, not Handset's: "STOP ALL" blocks here while
// Handset does not treat it as a keyword, so the carrier's refusal is what tells
// Handset, as it would in production.
const BLOCK_WORDS = new Set(['STOP', 'STOPALL', 'STOP ALL', 'UNSUBSCRIBE', 'CANCEL', 'END', 'QUIT']);
const UNBLOCK_WORDS = new Set(['START', 'UNSTOP']);
const blockKey = (from: string, to: string) => `${from} ${to}`;

export class Messaging {
  private messages = new Map<string, SimMessage>();
  /** Block rules, by (our number, recipient). */
  private blocks = new Set<string>();

  constructor(private readonly account: Account) {}

  get count(): number {
    return this.messages.size;
  }

  async send(input: unknown, opts: { reject: boolean }): Promise<Outcome<Record<string, unknown>>> {
    const req = this.readSend(input);
    if (isRefusal(req)) return req;
    const persona = this.account.personas.lookup(req.record.to);
    if (persona.sms === 'rejected') return refuse.invalidTo();
    if (opts.reject || this.blocks.has(blockKey(req.record.from, req.record.to))) {
      return refuse.blocked(req.record.from, req.record.to);
    }

    req.policy = persona.delivery;
    this.messages.set(req.record.id, req);
    // The answer is what Telnyx knew at acceptance, even if early receipts run first.
    const answer = outboundMessageResource(req.record);
    const early = this.account.random() < this.account.behaviour().earlyReceiptRate;
    const steps = this.receipts(req, persona);
    if (early) {
      // Stamped when they really happen: before the send is even answered.
      const signal = this.account.scheduler.signal;
      for (const step of steps) if (!signal.aborted) await step.fire(true, req.clock());
    } else {
      // Stamped when planned, so the persona's timing is exact whatever the timers' jitter.
      let after = 0;
      for (const step of steps) {
        after += step.afterMs;
        const due = req.record.receivedAt + after;
        this.account.scheduler.after(after, () => step.fire(false, due));
      }
    }
    return { ok: true, data: answer };
  }

  get(id: string): Outcome<Record<string, unknown>> {
    const m = this.messages.get(id);
    return m ? { ok: true, data: outboundMessageResource(m.record) } : refuse.notFound(`/v2/messages/${id}`);
  }

  /** An SMS/MMS from a phone to one of the account's numbers: message.received (fixture M1). */
  receive(input: InboundSms): { messageId: string; eventId: string } {
    if (!isE164(input.from)) throw new SimInputError('from must be an E.164 number');
    if (!isE164(input.to)) throw new SimInputError('to must be an E.164 number');
    const text = input.text ?? '';
    if (typeof text !== 'string') throw new SimInputError('text must be a string');
    const mediaUrls = input.media_urls ?? [];
    if (!Array.isArray(mediaUrls) || !mediaUrls.every((u) => typeof u === 'string')) {
      throw new SimInputError('media_urls must be a list of URLs');
    }
    if (text === '' && mediaUrls.length === 0) throw new SimInputError('an inbound message needs text or media_urls');
    const webhookUrl = input.webhook_url ?? this.account.webhookUrl();
    const clock = this.account.scheduler.timeline();
    const record = this.record({
      at: clock(),
      direction: 'inbound',
      from: input.from,
      to: input.to,
      text,
      mediaUrls,
      webhookUrl,
    });
    record.status = 'webhook_delivered';
    const ownUrl = input.webhook_url ?? null;
    // The sender is the far end of an inbound message.
    const policy = this.account.personas.lookup(input.from).delivery;
    this.messages.set(record.id, {
      record,
      clock,
      webhookUrl: ownUrl,
      webhookFailoverUrl: null,
      useProfileWebhooks: true,
      policy,
    });
    const word = text.trim().toUpperCase();
    if (BLOCK_WORDS.has(word)) this.blocks.add(blockKey(input.to, input.from));
    if (UNBLOCK_WORDS.has(word)) this.blocks.delete(blockKey(input.to, input.from));
    const event = messageEvents.messageReceived(record, clock());
    void this.account.sender.emit(event, [input.webhook_url, this.account.webhookUrl()], { lane: record.id, policy });
    return { messageId: record.id, eventId: event.id };
  }

  reset(): void {
    this.messages.clear();
  }

  private readSend(input: unknown): SimMessage | Refusal {
    if (!isBody(input)) return refuse.malformedBody('The request body must be a JSON object.');
    const body: Body = input;
    if (isBlank(body['to'])) return refuse.missing('to');
    if (!isE164(body['to'])) return refuse.invalidTo();
    if (isBlank(body['from'])) return refuse.missing('from');
    const from = body['from'];
    if (typeof from !== 'string' || !(isE164(from) || SHORT_CODE.test(from) || ALPHANUMERIC_SENDER.test(from))) {
      return refuse.invalidFrom();
    }
    const text = optionalString(body, 'text');
    if (isRefusal(text)) return text;
    if (text !== null && text.length > MAX_TEXT_LENGTH) return refuse.badParameter('text', 'The text is too long.');
    const media = body['media_urls'] ?? [];
    const isUrl = (u: unknown) => typeof u === 'string' && /^https?:\/\//.test(u);
    if (!Array.isArray(media) || media.length > MAX_MEDIA || !media.every(isUrl)) {
      return refuse.badParameter('media_urls', `'media_urls' must be a list of at most ${MAX_MEDIA} http(s) URLs.`);
    }
    const mediaUrls = media as string[];
    if ((text === null || text === '') && mediaUrls.length === 0) return refuse.missing('text');
    const subject = optionalString(body, 'subject');
    if (isRefusal(subject)) return subject;
    const profileId = optionalString(body, 'messaging_profile_id');
    if (isRefusal(profileId)) return profileId;
    const webhookUrl = optionalUrl(body, 'webhook_url');
    if (isRefusal(webhookUrl)) return webhookUrl;
    const webhookFailoverUrl = optionalUrl(body, 'webhook_failover_url');
    if (isRefusal(webhookFailoverUrl)) return webhookFailoverUrl;
    const useProfile = body['use_profile_webhooks'];
    if (useProfile !== undefined && typeof useProfile !== 'boolean') {
      return refuse.badParameter('use_profile_webhooks', "'use_profile_webhooks' must be a boolean.");
    }
    const useProfileWebhooks = useProfile !== false;

    const clock = this.account.scheduler.timeline();
    const record = this.record({
      at: clock(),
      direction: 'outbound',
      from,
      to: body['to'],
      text: text ?? '',
      mediaUrls,
      webhookUrl: webhookUrl ?? (useProfileWebhooks ? this.account.webhookUrl() : null),
      messagingProfileId: profileId ?? undefined,
    });
    record.subject = subject;
    record.webhookFailoverUrl = webhookFailoverUrl;
    return { record, clock, webhookUrl, webhookFailoverUrl, useProfileWebhooks, policy: NO_POLICY };
  }

  private record(r: {
    at: number;
    direction: 'outbound' | 'inbound';
    from: string;
    to: string;
    text: string;
    mediaUrls: string[];
    webhookUrl: string | null;
    messagingProfileId?: string | undefined;
  }): MessageRecord {
    const isMms = r.mediaUrls.length > 0;
    const { encoding, parts } = segmentsOf(r.text, isMms);
    const now = r.at;
    return {
      id: randomUUID(),
      direction: r.direction,
      type: isMms ? 'MMS' : 'SMS',
      from: r.from,
      to: r.to,
      text: r.text,
      subject: null,
      mediaUrls: r.mediaUrls,
      messagingProfileId: r.messagingProfileId ?? this.account.messagingProfileId,
      organizationId: this.account.organizationId,
      encoding,
      parts,
      price: priceOf(parts, isMms),
      tags: [],
      webhookUrl: r.webhookUrl,
      webhookFailoverUrl: null,
      receivedAt: now,
      sentAt: null,
      completedAt: null,
      validUntil: r.direction === 'outbound' ? now + VALIDITY_MS : null,
      status: 'queued',
      errors: [],
      tcrCampaignId: this.account.tcrCampaignId,
    };
  }

  /** Telnyx tries the message's own URLs first, then the profile's (use_profile_webhooks). */
  private urls(m: SimMessage): Array<string | null> {
    return [m.webhookUrl, m.webhookFailoverUrl, m.useProfileWebhooks ? this.account.webhookUrl() : null];
  }

  /** The receipts a persona produces, each after the previous one (simulated ms). */
  private receipts(
    m: SimMessage,
    persona: ResolvedPersona,
  ): Array<{ afterMs: number; fire: (early: boolean, at: number) => Promise<void> }> {
    const sent = { afterMs: SMS_SENT_AFTER_MS, fire: (early: boolean, at: number) => this.fireSent(m, early, at) };
    const final = (status: FinalStatus, afterMs = SMS_FINALIZED_AFTER_MS) => ({
      afterMs,
      fire: (early: boolean, at: number) => this.fireFinalized(m, status, persona.smsErrorCode, early, at),
    });
    switch (persona.sms) {
      case 'delivered':
      case 'delivery_failed':
      case 'delivery_unconfirmed':
        return [sent, final(persona.sms)];
      case 'sent_only':
        return [sent];
      // Never reached the upstream carrier: no message.sent.
      case 'sending_failed':
      case 'expired':
        return [final(persona.sms, SMS_SENT_AFTER_MS)];
      case 'rejected':
        return [];
    }
  }

  private fireSent(m: SimMessage, early: boolean, now: number): Promise<void> {
    m.record.sentAt = now;
    m.record.status = 'sent';
    const event = messageEvents.messageSent(m.record, now);
    return this.account.sender.emit(event, this.urls(m), { early, lane: m.record.id, policy: m.policy });
  }

  private async fireFinalized(
    m: SimMessage,
    status: FinalStatus,
    errorCode: string | null,
    early: boolean,
    now: number,
  ) {
    const { scheduler, sender } = this.account;
    const failed = status === 'delivery_failed' || status === 'sending_failed' || status === 'expired';
    m.record.completedAt = now;
    m.record.status = status;
    m.record.errors = failed ? [deliveryError(errorCode ?? '40008')] : [];
    const event = messageEvents.messageFinalized(m.record, { status, errors: m.record.errors }, now);
    const answered = sender.emit(event, this.urls(m), { early, lane: m.record.id, policy: m.policy });
    if (status === 'delivered' && this.account.random() < this.account.behaviour().contradictionRate) {
      scheduler.after(CONTRADICTION_AFTER_MS, () => {
        const contradiction = messageEvents.messageFinalized(
          m.record,
          { status: 'delivery_failed', errors: [deliveryError('40008')] },
          now + CONTRADICTION_AFTER_MS,
        );
        void sender.emit(contradiction, this.urls(m), { copy: 'contradiction', lane: m.record.id, policy: m.policy });
      });
    }
    await answered;
  }
}
