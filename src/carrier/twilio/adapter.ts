// The Twilio implementation of the carrier seam, for messaging: webhooks in
// (X-Twilio-Signature over the public URL and the sorted form parameters, stored
// under ids derived from the facts), the REST client out, and the events
// reconciliation writes in place of callbacks that never came. Calls stay on
// Telnyx (carriesCalls false; the API refuses a call from a Twilio number).

import type { CarrierAdapter } from '../carrier.js';
import { twilioClient } from './client.js';
import { parseTwilioEvent, twilioEnvelope, twilioEventTypes, twilioReply, twilioStorable } from './events.js';
import { twilioReconciled } from './reconciled.js';
import { verifyTwilioSignature } from './signature.js';

export interface TwilioAdapterOptions {
  accountSid: string;
  /** Signs the webhooks and authenticates the REST calls. */
  authToken: string;
  /** Defaults to https://api.twilio.com. */
  apiUrl?: string;
  /** The ingest's base URL as Twilio reaches it; read when needed (the ingest's own may be learned after start). */
  publicIngestUrl: () => string;
  timeoutMs?: number;
}

export function twilioAdapter(opts: TwilioAdapterOptions): CarrierAdapter {
  const { authToken } = opts;
  return {
    name: 'twilio',
    verify: (raw, headers, _nowSeconds, url) =>
      verifyTwilioSignature(authToken, `${opts.publicIngestUrl()}${url}`, raw, headers),
    storable: twilioStorable,
    envelope: twilioEnvelope,
    reply: twilioReply,
    parse: parseTwilioEvent,
    eventTypes: twilioEventTypes,
    reconciled: twilioReconciled,
    carriesCalls: false,
    client: twilioClient({
      apiUrl: opts.apiUrl ?? 'https://api.twilio.com',
      accountSid: opts.accountSid,
      authToken,
      publicIngestUrl: opts.publicIngestUrl,
      ...(opts.timeoutMs !== undefined ? { timeoutMs: opts.timeoutMs } : {}),
    }),
    settings: { verify: 'TWILIO_AUTH_TOKEN', client: 'TWILIO_ACCOUNT_SID' },
  };
}
