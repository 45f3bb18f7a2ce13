// The simulated Telnyx account the products run under: its identifiers
// (organization, messaging profile, Call Control connection, 10DLC campaign), its
// profile webhook URL, and the machinery messaging and calls share: the clock and
// timers, the seeded randomness, the behaviour knobs, the personas and the webhook
// sender. One object, handed to each product; nothing here decides anything.

import type { Logger } from 'pino';
import type { Behaviour } from './behaviour.js';
import type { PersonaBook } from './personas.js';
import type { Scheduler } from './scheduler.js';
import type { WebhookSender } from './webhooks.js';

export interface Account {
  readonly organizationId: string;
  readonly messagingProfileId: string;
  /** The Call Control App inbound calls arrive on. */
  readonly connectionId: string;
  readonly tcrCampaignId: string;
  /** Whether a dial may use this connection_id (any non-blank id unless one was configured). */
  acceptsConnection(id: string): boolean;
  /** The profile / connection webhook URL; null sends webhooks only where a resource names its own. */
  webhookUrl(): string | null;
  behaviour(): Behaviour;
  /** The seeded stream; every decision draws from it. */
  random(): number;
  readonly scheduler: Scheduler;
  readonly sender: WebhookSender;
  readonly personas: PersonaBook;
  readonly log: Logger;
}
