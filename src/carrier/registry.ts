// The carriers this deployment talks to, by name, from its configuration. Every
// row that came from or goes to a carrier names it; code looks the adapter up here
// by that name (a message's carrier sends it, a number's carrier routes its calls).
// Adding a carrier: a folder implementing CarrierAdapter, its settings in config.ts,
// and a line below.

import type { Config } from '../config.js';
import type { CarrierAdapter } from './carrier.js';
import { telnyxAdapter } from './telnyx/adapter.js';
import { twilioAdapter } from './twilio/adapter.js';

export type Carriers = ReadonlyMap<string, CarrierAdapter>;

/** The ingest's public base URL by default: http://<HANDSET_HOST>:<HANDSET_INGEST_PORT>. */
export const defaultPublicIngestUrl = (config: Config): string =>
  config.publicIngestUrl ??
  `http://${config.host.includes(':') ? `[${config.host}]` : config.host}:${config.ingestPort}`;

/**
 * Every configured carrier; `extra` adds adapters made elsewhere (a test's own
 * carrier). `publicIngestUrl` is read whenever a carrier needs it (the platform
 * learns its ingest's address once it listens).
 */
export function carriers(
  config: Config,
  extra: readonly CarrierAdapter[] = [],
  publicIngestUrl: () => string = () => defaultPublicIngestUrl(config),
): Carriers {
  const t = config.telnyx;
  const w = config.twilio;
  const all: CarrierAdapter[] = [
    telnyxAdapter({
      publicKey: t.publicKey,
      toleranceSeconds: config.webhookToleranceSeconds,
      client: t.apiKey
        ? {
            apiUrl: t.apiUrl,
            apiKey: t.apiKey,
            connectionId: t.connectionId,
            messagingProfileId: t.messagingProfileId,
            timeoutMs: config.carrierTimeoutMs,
          }
        : null,
    }),
    ...(w
      ? [twilioAdapter({ accountSid: w.accountSid, authToken: w.authToken, apiUrl: w.apiUrl, publicIngestUrl })]
      : []),
    ...extra,
  ];
  return new Map(all.map((a) => [a.name, a]));
}

/** The carriers this deployment can send through (those with a REST client), by name. */
export function configuredCarrierNames(all: Carriers): string[] {
  return [...all.values()].filter((a) => a.client).map((a) => a.name);
}

/** The adapter a row names; a row naming a carrier this deployment does not know is a configuration error. */
export function carrierNamed(all: Carriers, name: string): CarrierAdapter {
  const found = all.get(name);
  if (!found) throw new Error(`no carrier named "${name}" is configured`);
  return found;
}

/** The client of the carrier a row names, or an error saying which setting is missing. */
export function clientOf(all: Carriers, name: string) {
  const client = carrierNamed(all, name).client;
  if (!client) throw new Error(`carrier "${name}" has no REST client configured (its API key)`);
  return client;
}

/** The voice client of the carrier a row names, or an error when it carries no calls. */
export function voiceOf(all: Carriers, name: string) {
  const voice = clientOf(all, name).voice;
  if (!voice) throw new Error(`carrier "${name}" carries no calls`);
  return voice;
}
