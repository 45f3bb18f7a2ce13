// The carrier seam, in Handset's vocabulary. A carrier adapter turns the bytes a
// carrier posts into a verified envelope and then into a normalized CarrierEvent,
// writes what reconciliation learned as events in the carrier's own format, and
// holds the carrier's REST client (messaging; voice when the carrier has it).
// Every row that came from or goes to a carrier names it, and the code picks the
// adapter by that name (registry.ts). A carrier's own words (Telnyx's
// call_control_id, client_state, command_id…) stay inside its folder.
//
// The words used here: a `leg` is the carrier's reference for one call leg (what
// commands address); `echo` is the state we gave a leg when we dialed it, which the
// carrier hands back on each of its events; a `commandKey` is what the carrier
// de-duplicates a repeated command by; an `idempotencyKey` makes a repeated send
// return the first one's answer.

import type { IncomingHttpHeaders } from 'node:http';

/** What a carrier's delivery receipt means for our message. */
export type ReceiptStatus =
  | 'sent' // accepted upstream: history only
  | 'delivered' // terminal
  | 'failed' // terminal
  | 'progress' // queued/sending and other intermediate words: history only
  | 'unconfirmed'; // the carrier will never know: history only, the message stays sent

/** Where a carrier fact came from: its webhook, or our lookup of the resource at the carrier. */
export type FactSource = 'webhook' | 'reconciliation';

export type CarrierEvent = (
  | {
      kind: 'message.received';
      occurredAt: Date;
      carrierMessageId: string;
      from: string;
      to: string;
      text: string;
      mediaUrls: string[];
    }
  | {
      kind: 'message.receipt';
      occurredAt: Date;
      eventType: string;
      carrierMessageId: string;
      carrierStatus: string;
      status: ReceiptStatus;
      errorCode: string | null;
      /**
       * Our id of the message, when the carrier hands back a marker we gave the send
       * (Twilio keeps the StatusCallback URL per message): a receipt that comes
       * before we learned the carrier's id still says whose it is.
       */
      ourMessageId?: string | null;
    }
  | {
      kind: 'call.initiated';
      occurredAt: Date;
      leg: string;
      direction: 'inbound' | 'outbound';
      from: string;
      to: string;
      echo: unknown;
    }
  | {
      kind: 'call.answered';
      occurredAt: Date;
      leg: string;
      echo: unknown;
    }
  | {
      kind: 'call.hangup';
      occurredAt: Date;
      leg: string;
      echo: unknown;
      hangupCause: string;
      /**
       * Whether the leg was ever connected, as far as the hangup says: true (it was),
       * false (it never was: a timeout, busy, rejected, canceled), null (cannot tell).
       */
      connected: boolean | null;
      startedAt: Date | null;
      endedAt: Date | null;
    }
  | {
      kind: 'recording.saved';
      occurredAt: Date;
      /** The leg that was recorded, and our state echoed back. */
      leg: string;
      echo: unknown;
      /** The carrier's id of the recording: a recording is stored once per id. */
      recordingId: string;
      startedAt: Date;
      endedAt: Date;
      /** Where its audio can be fetched for a short while (Telnyx: 10 minutes), and in which format. */
      audioUrl: string | null;
      format: string | null;
    }
  | {
      kind: 'recording.failed';
      occurredAt: Date;
      leg: string;
      echo: unknown;
      reason: string;
    }
  | { kind: 'unknown'; eventType: string }
) & { source: FactSource };

export type CarrierEventKind = CarrierEvent['kind'];

export interface Envelope {
  eventId: string;
  eventType: string;
  /** The carrier resource the event is about (a leg, a message), when it names one. */
  subject: string | null;
}

/** Why a webhook was refused before anything was parsed or stored. */
export type VerifyFailure = 'missing_signature' | 'malformed_signature' | 'stale_timestamp' | 'bad_signature';

/** The request a webhook came in, beside its bytes and headers. */
export interface WebhookRequest {
  /** The path and query as received (`/webhooks/twilio?message=…`). */
  url: string;
  headers: IncomingHttpHeaders;
  /** Unix seconds now. */
  nowSeconds: number;
}

/** The body of a 200 when the carrier expects one of its own (Twilio: empty TwiML for an inbound message). */
export interface WebhookReply {
  contentType: string;
  body: string;
}

export interface CarrierAdapter {
  /** Stable; stored on every row that came from or goes to this carrier, and the ingest path /webhooks/<name>. */
  readonly name: string;
  /**
   * Checks the signature over the raw bytes (null when authentic); null itself when
   * this process has nothing to check with (it then receives no webhooks from it).
   */
  readonly verify:
    | ((raw: Buffer, headers: IncomingHttpHeaders, nowSeconds: number, url: string) => VerifyFailure | null)
    | null;
  /**
   * The JSON stored for a verified body, when the carrier does not post JSON
   * (Twilio's form); null when the body is not one. Absent: the body is JSON, stored as sent.
   */
  storable?(raw: Buffer, req: WebhookRequest): string | null;
  /** The carrier's event id, type and subject from a parsed body, or null if it is not an envelope. */
  envelope(body: unknown): Envelope | null;
  /** What a stored or duplicate event is answered with, when the carrier expects a body of its own. */
  reply?(envelope: Envelope): WebhookReply | null;
  /** Normalizes a stored payload. Throws MalformedCarrierEvent when a known type is missing fields. */
  parse(payload: unknown): CarrierEvent;
  /** The carrier's event types that normalize to `kind` (to look for stored events of a kind). */
  eventTypes(kind: CarrierEventKind): readonly string[];
  /**
   * A fact learned from a lookup, as events in the carrier's own wire format with
   * deterministic ids, so they are stored, de-duplicated and applied exactly like
   * webhooks (and a late webhook of the same fact finds nothing left to do).
   */
  reconciled(fact: ReconciledFact): ReconciledEvent[];
  /** Whether it carries calls too (every carrier carries messages); the API refuses calls on one that does not. */
  readonly carriesCalls: boolean;
  /** The carrier's REST API, when this process is configured to talk to it. */
  readonly client: CarrierClient | null;
  /** The settings that give it `verify` and `client`, named in the error when a role needs one and has none. */
  readonly settings: { readonly verify: string; readonly client: string };
}

export class MalformedCarrierEvent extends Error {
  override name = 'MalformedCarrierEvent';
}

/** What reconciliation learned about a leg, a message or a recording. */
export type ReconciledFact =
  | { kind: 'leg.answered'; leg: ReconciledLeg; answeredAt: Date }
  | {
      kind: 'leg.ended';
      leg: ReconciledLeg;
      /** Seconds the leg was connected (0: never answered). */
      connectedSeconds: number;
      startedAt: Date | null;
      endedAt: Date;
    }
  | {
      kind: 'message.finalized';
      carrierMessageId: string;
      to: string;
      carrierStatus: string;
      errorCode: string | null;
      at: Date;
    }
  | ({ kind: 'recording.saved'; leg: ReconciledLeg } & RecordingLookup)
  /** The call ended long ago and the carrier lists no recording of it: none will come. */
  | { kind: 'recording.missing'; leg: ReconciledLeg; at: Date };

export interface ReconciledLeg {
  leg: string;
  /** Our state for the leg (what we gave it when we dialed), or null for an inbound caller. */
  echo: unknown;
  from: string;
  to: string;
}

export interface ReconciledEvent {
  eventId: string;
  eventType: string;
  subject: string;
  rawJson: string;
}

/**
 * Refusals Handset acts on beyond failing the command, in its own words (each
 * adapter maps its carrier's codes): the recipient opted out of messages from the
 * sending number at the carrier, which Handset then records too.
 */
export type RefusalReason = 'recipient_opted_out';

/** What the carrier said to a command. */
export type CommandResult<T = unknown> =
  | ({ ok: true } & T)
  | { ok: false; kind: 'rejected'; status: number; code: string; detail: string; reason?: RefusalReason } // 4xx: do not retry
  | {
      ok: false;
      kind: 'retry';
      status: number | null;
      retryAfterMs: number | null;
      detail: string;
      /**
       * The carrier certainly did not take the request: it never reached the carrier
       * (connection refused, no such host, a TLS failure, no connection within the
       * connect timeout), or the carrier answered what its documentation defines as
       * not processed (Twilio's 429). False: the outcome is unknown (a timeout after
       * sending, a cut connection, a 5xx, an answer we could not read).
       */
      notAccepted: boolean;
      /**
       * The carrier asked us to slow down (a 429: Telnyx 10011/40011, Twilio
       * 20429): not processed, safe to repeat after `retryAfterMs`. Not a refusal
       * (the carrier is up) and not a reason to fail over.
       */
      throttled?: boolean;
    }; // 429, 5xx, network

export interface SendMessage {
  from: string;
  to: string;
  text: string | null;
  mediaUrls: string[];
  /**
   * Our id for the send (the message id): the carrier replays its answer to a
   * repeated key instead of sending again, so a send whose outcome we could not
   * learn is repeated with it, never turned into a second message.
   */
  idempotencyKey: string;
}

export interface Dial {
  from: string;
  to: string;
  timeoutSecs: number;
  /** Handed back by the carrier on every event of the new leg. */
  echo: unknown;
  /** The carrier ignores a repeated command key for a while, so a quick re-run does not dial twice. */
  commandKey: string;
  /** Our id for the dial (the leg id): a repeated key is answered with the first dial's leg, not a second call. */
  idempotencyKey: string;
}

export type CallAction =
  | { action: 'answer' }
  | { action: 'hangup' }
  | { action: 'reject' }
  | { action: 'bridge'; otherLeg: string }
  /** Record the leg (both parties once bridged), one channel per party; its file arrives as recording.saved. */
  | { action: 'record_start'; format: 'wav'; channels: 'dual' };

/** A leg as the carrier knows it now. `observedAt` is the carrier's clock when it answered. */
export interface LegLookup {
  alive: boolean;
  startedAt: Date | null;
  endedAt: Date | null;
  /** Seconds the leg has been (or was) connected; 0 when it never answered. */
  connectedSeconds: number;
  observedAt: Date;
}

export interface MessageLookup {
  carrierStatus: string;
  status: ReceiptStatus;
  errorCode: string | null;
  /** When the carrier reached that status (completed or sent time), else when it answered. */
  at: Date;
  observedAt: Date;
}

/** A lookup's answer: the resource, or "the carrier no longer knows it" (it keeps call data only briefly). */
export type LookupResult<T> =
  | ({ ok: true } & T)
  | { ok: false; kind: 'unknown'; detail: string }
  | { ok: false; kind: 'retry'; detail: string };

/**
 * Whether a number is in this deployment's account at the carrier, as the carrier
 * says now; `retry` when it could not be asked (no answer, 5xx, an answer we could not read).
 */
export type InventoryResult = { ok: true; owned: boolean } | { ok: false; kind: 'retry'; detail: string };

/** A message the carrier has, found by what it was sent with (a send whose answer we lost). */
export interface FoundMessage {
  carrierMessageId: string;
  parts: number | null;
  createdAt: Date;
}

/** What a send whose answer we never read was sent with. */
export interface SentQuery {
  from: string;
  to: string;
  text: string | null;
  mediaUrls: string[];
  /** No earlier than this (a little before the first request whose outcome is unknown). */
  since: Date;
}

/** The carrier's REST API, as the workers (and the API, for a number's claim) use it. */
export interface CarrierClient {
  /**
   * Whether a repeated send with the same idempotencyKey is answered with the first
   * one instead of sending again (Telnyx). Without it (Twilio), a send whose outcome
   * is unknown is never repeated before `findSent` shows the carrier has none.
   */
  readonly idempotentSends: boolean;
  /** The message's parts as the carrier counts (and bills) them, when its answer says. */
  sendMessage(m: SendMessage): Promise<CommandResult<{ carrierMessageId: string; parts: number | null }>>;
  /** The carrier's messages matching a send (newest first); a carrier without idempotentSends has it. */
  findSent?(q: SentQuery): Promise<LookupResult<{ found: FoundMessage[] }>>;
  lookupMessage(carrierMessageId: string): Promise<LookupResult<MessageLookup>>;
  /** Whether an E.164 number is one of the account's own at the carrier (its inventory). */
  ownsNumber(number: string): Promise<InventoryResult>;
  /** Call control; absent for a carrier that only carries messages. */
  readonly voice: VoiceClient | null;
}

export interface VoiceClient {
  dial(d: Dial): Promise<CommandResult<{ leg: string }>>;
  /**
   * "The call has already ended" counts as success (for a hangup the wanted state
   * holds), reported as `alreadyEnded` for the callers to whom it means more.
   */
  callAction(leg: string, a: CallAction, commandKey: string): Promise<CommandResult<{ alreadyEnded: boolean }>>;
  lookupLeg(leg: string): Promise<LookupResult<LegLookup>>;
  /** A fresh address of a recording's audio (the one its webhook gave expires). */
  lookupRecording(recordingId: string): Promise<LookupResult<{ audioUrl: string }>>;
  /**
   * The saved recordings of a leg, as the carrier lists them now (an empty list:
   * none saved, or none yet), and the carrier's time of the answer; `to` and
   * `since` narrow the carrier's search.
   */
  recordingsOfLeg(q: {
    leg: string;
    to: string;
    since: Date;
  }): Promise<LookupResult<{ recordings: RecordingLookup[]; observedAt: Date }>>;
}

export interface RecordingLookup {
  recordingId: string;
  startedAt: Date;
  endedAt: Date;
  /** A fresh address of its audio, and the format it is in. */
  audioUrl: string | null;
  format: string | null;
}
