// The event catalogue as OpenAPI 3.1 `webhooks`: every event type with the body
// a receiver gets, its `data` the schema the domain declares for it (the same
// TypeBox schema the API serves for that resource), so a receiver can generate
// its types from the same document as its API client.

import { type TSchema, Type } from 'typebox';
import { EVENT_TYPES, type EventSchemas, type EventType } from './outbox.sql.js';

const HEADERS = [
  ['webhook-id', 'The event id: the same on every attempt; deduplicate on it'],
  ['webhook-timestamp', "This attempt's Unix time in seconds"],
  ['webhook-signature', 'v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">, space-separated during a rotation'],
] as const;

export function webhooksDocument(schemas: EventSchemas) {
  return Object.fromEntries(
    EVENT_TYPES.flatMap((type) => {
      const data = schemas[type];
      return data ? [[type, { post: operation(type, data) }]] : [];
    }),
  );
}

/** The event types no domain has declared a schema for (a test holds this to none). */
export const undocumentedEventTypes = (schemas: EventSchemas): EventType[] => EVENT_TYPES.filter((t) => !schemas[t]);

function operation(type: EventType, data: TSchema) {
  return {
    operationId: `webhook_${type.replaceAll('.', '_')}`,
    summary: type,
    tags: ['Webhooks'],
    parameters: HEADERS.map(([name, description]) => ({
      name,
      in: 'header',
      required: true,
      description,
      schema: { type: 'string' },
    })),
    requestBody: {
      required: true,
      content: {
        'application/json': {
          schema: Type.Object({
            id: Type.String({ description: 'evt_…, the webhook-id' }),
            type: Type.Literal(type),
            timestamp: Type.String({ format: 'date-time', description: 'when the transition happened' }),
            account_id: Type.String(),
            data,
          }),
        },
      },
    },
    responses: {
      '2XX': { description: 'Received. Any other answer, or none within the timeout, is retried.' },
    },
  };
}
