// Telnyx delivery receipts (message.finalized, delivered) as the simulator
// renders them, byte for byte, signed with the bench's carrier key. Bodies are
// made from one rendered template by swapping the two ids, and every request is
// signed before a measurement starts: signing is the carrier's cost, not ours.

import { generateKeyPairSync, randomUUID, type KeyObject } from 'node:crypto';
import { signTelnyxWebhook, telnyxPublicKeyBase64 } from '../../carrier/telnyx/signature.js';
import { telnyxWebhook } from '../../sim/webhook-builders.js';

export interface SignedWebhook {
  eventId: string;
  carrierMessageId: string;
  body: Buffer;
  headers: Record<string, string>;
}

const TEMPLATE_EVENT_ID = '00000000-0000-4000-8000-00000000e7e7';
const TEMPLATE_MESSAGE_ID = '00000000-0000-4000-8000-00000000a5a5';

export class ReceiptFactory {
  readonly publicKeyBase64: string;
  private readonly privateKey: KeyObject;
  private readonly templates: Map<number, string> = new Map();

  constructor() {
    const { publicKey, privateKey } = generateKeyPairSync('ed25519');
    this.privateKey = privateKey;
    this.publicKeyBase64 = telnyxPublicKeyBase64(publicKey);
  }

  /** The unsigned body of a receipt; what ingest stores for it. */
  body(eventId: string, carrierMessageId: string, attempt = 1): string {
    let template = this.templates.get(attempt);
    if (!template) {
      template = telnyxWebhook.messageFinalized({
        eventId: TEMPLATE_EVENT_ID,
        messageId: TEMPLATE_MESSAGE_ID,
        from: '+13125550001',
        to: '+13125550002',
        text: 'Hello there!',
        status: 'delivered',
        attempt,
        deliveredTo: 'https://handset.example/webhooks/telnyx',
      });
      this.templates.set(attempt, template);
    }
    return template.replace(TEMPLATE_EVENT_ID, eventId).replace(TEMPLATE_MESSAGE_ID, carrierMessageId);
  }

  /** A signed receipt; a new event id unless one is given (a replay keeps its id). */
  receipt(carrierMessageId: string = randomUUID(), eventId: string = randomUUID(), attempt = 1): SignedWebhook {
    const body = Buffer.from(this.body(eventId, carrierMessageId, attempt), 'utf8');
    const signature = signTelnyxWebhook(this.privateKey, Math.floor(Date.now() / 1000), body);
    return { eventId, carrierMessageId, body, headers: { 'content-type': 'application/json', ...signature } };
  }

  /** n receipts, each a new event about a new message. */
  unique(n: number): SignedWebhook[] {
    const out = new Array<SignedWebhook>(n);
    for (let i = 0; i < n; i++) out[i] = this.receipt();
    return out;
  }
}
