// Every machine `code` the API answers with, declared once: the HTTP statuses it
// comes with and, for a person, what it means and what to do. Handlers can name
// no other (ErrorCode); the API serves this list as /docs/errors, and every
// problem's `type` links to its entry there. Listed in the order a request meets
// them: reading it, authenticating it, checking its input, then what it asks for.

export interface ErrorDoc {
  /** The statuses this code is answered with. */
  status: readonly number[];
  /** What it means and what to do about it, in a sentence or two. */
  about: string;
}

export const ERROR_CODES = {
  // Reading the request
  malformed_request: {
    status: [400],
    about: 'The request could not be read as HTTP. Send a well-formed request; the connection is closed after this.',
  },
  headers_too_large: {
    status: [431],
    about: 'The request’s headers are larger than the server accepts. Send fewer or shorter headers.',
  },
  request_timeout: {
    status: [408],
    about: 'The request did not arrive in time (its headers within 10 s, all of it within 30 s). Send it again, whole.',
  },
  invalid_path: {
    status: [400],
    about: 'The path could not be decoded (a broken percent-escape such as %zz). Percent-encode the path correctly.',
  },
  path_too_long: { status: [414], about: 'The URL is longer than the server accepts. Shorten it.' },
  route_not_found: {
    status: [404],
    about: 'No route answers this method and path. Check both against the API reference at /docs.',
  },
  not_found: { status: [404], about: 'Nothing is served at this path. Check it against the API reference at /docs.' },
  body_too_large: {
    status: [413],
    about: 'The request body is larger than the API accepts. Send less, or split a batch into several.',
  },
  unsupported_media_type: {
    status: [415],
    about:
      'The body is not JSON. Send it with Content-Type: application/json (a request without a body needs no Content-Type).',
  },

  // Who is asking, and how often
  unauthorized: {
    status: [401],
    about:
      'The API key is missing, malformed, revoked or expired. Send Authorization: Bearer <api key> with a live key.',
  },
  rate_limited: {
    status: [429],
    about:
      'Too many requests from this API key or this address in the last second. Wait for Retry-After seconds, then retry.',
  },
  too_many_recoveries: {
    status: [429],
    about: 'This account asked for more endpoint recoveries in the last hour than it may. Wait for Retry-After.',
  },

  // The request's input
  invalid_request: {
    status: [400, 422],
    about:
      'The input is not what this route takes: 400 for JSON that does not parse or holds what cannot be stored ' +
      '(such as NUL), 422 for a value the schema refuses. `param` names the field and `detail` says what is allowed.',
  },
  unknown_field: {
    status: [422],
    about:
      'The body or query names a field this route does not take. `param` names it and `detail` suggests the nearest ' +
      'one it does take (for example body, not text). Nothing is ignored silently: remove or rename it.',
  },
  invalid_batch_size: {
    status: [422],
    about:
      'A batch holds 1 to 1,000 messages in `messages`. Split a longer list into several batches (each with its own ' +
      'Idempotency-Key).',
  },
  invalid_text: {
    status: [422],
    about:
      'A string holds a lone UTF-16 surrogate (an unpaired \\uD800-\\uDFFF escape), which is not text. Fix its encoding.',
  },
  invalid_phone_number: {
    status: [422],
    about:
      'The phone number is not a possible number in E.164 form (+ and the country code, such as +13125550142). ' +
      '`detail` says what is wrong with it.',
  },
  invalid_media_url: { status: [422], about: 'A media URL is not a public https URL the carrier can fetch.' },
  invalid_send_at: {
    status: [422],
    about: 'send_at must be an RFC 3339 time in the future, and not too far ahead: `detail` says how far it may be.',
  },
  invalid_ring_targets: {
    status: [422],
    about:
      'A call rings a list of numbers in order: give `to` as that list, not empty and not too long (`detail` says).',
  },
  invalid_ring_timeout: { status: [422], about: 'ring_timeout_secs is out of range: `detail` gives the bounds.' },
  invalid_period: { status: [422], about: 'A usage period must end after it starts: `to` after `from`.' },
  invalid_since: {
    status: [422],
    about: 'A recovery starts from a moment in the past: `since` must not be in the future.',
  },
  invalid_url: {
    status: [422],
    about: 'A webhook endpoint URL must be an absolute https URL without credentials.',
  },
  url_unresolvable: {
    status: [422],
    about: 'The webhook endpoint’s host does not resolve in DNS. Check its spelling, or create its DNS record first.',
  },
  url_not_allowed: {
    status: [422],
    about:
      'The webhook endpoint resolves to a private, loopback or reserved address, which Handset does not call. Use a ' +
      'public address (an operator can allow private ones with HANDSET_ALLOW_PRIVATE_WEBHOOK_URLS).',
  },
  invalid_idempotency_key: {
    status: [400],
    about: 'The Idempotency-Key header must be 1 to 255 visible ASCII characters (a UUID is a good choice).',
  },
  idempotency_key_in_use: {
    status: [409],
    about: 'A request with this Idempotency-Key is still being processed. Retry after it finishes to get its answer.',
  },
  idempotency_key_reused: {
    status: [422],
    about:
      'This Idempotency-Key was used with a different request (method, path or body). Use a new key for a new request.',
  },

  // What the request asks for
  resource_not_found: {
    status: [404],
    about: 'No such resource in this account (another account’s ids are not found either). Check the id.',
  },
  resource_missing: {
    status: [404],
    about: 'starting_after names no item of this list. Page on from an id the list returned.',
  },
  empty_message: { status: [422], about: 'A message needs a body, media_urls, or both.' },
  from_not_owned: {
    status: [422],
    about: '`from` is not one of this account’s phone numbers. Add it with POST /v1/phone_numbers first.',
  },
  recipient_opted_out: {
    status: [422],
    about:
      'The recipient texted STOP to this number: nothing is sent to them from it, and nothing is billed. They opt back ' +
      'in by texting START to it.',
  },
  invalid_fallback: {
    status: [422],
    about:
      '`fallback_from` must be another of this account’s numbers, on a different carrier from `from`. ' +
      'List your numbers and their carriers with GET /v1/phone_numbers.',
  },
  carrier_required: {
    status: [422],
    about: 'This deployment has several carriers: name the number’s `carrier` (GET /v1/carriers lists them).',
  },
  carrier_not_configured: {
    status: [422],
    about: 'No carrier of that name is configured here. Use one GET /v1/carriers lists.',
  },
  voice_not_supported: {
    status: [422],
    about: 'This number’s carrier carries no calls here. Call from another number.',
  },
  message_not_cancelable: {
    status: [409],
    about: 'Only a scheduled message can be canceled; this one has already been queued or sent.',
  },
  number_unavailable: {
    status: [422],
    about: 'This number cannot be added: the carrier account does not hold it, or another account has it.',
  },
  number_exists: { status: [409], about: 'This number is already one of this account’s numbers.' },
  number_not_owned: { status: [422], about: 'The number is not one of this account’s phone numbers.' },
  number_in_use: {
    status: [409],
    about:
      'The number cannot be released while a call on it rings or talks, or a message from it waits to be sent. ' +
      'Release it once they are done (or cancel the scheduled messages).',
  },
  too_many_endpoints: {
    status: [422],
    about: 'The account has as many webhook endpoints as it may have. Delete one first.',
  },
  endpoint_disabled: {
    status: [409],
    about: 'The webhook endpoint is disabled, so nothing is sent to it. Enable it (PATCH enabled: true) first.',
  },
  recovery_in_progress: {
    status: [409],
    about: 'A recovery of this endpoint is still running. Wait for it to finish before asking for another.',
  },
  nothing_to_redeliver: {
    status: [409],
    about: 'The event has no delivery to an endpoint that still exists and is enabled.',
  },
  recording_audio_unavailable: {
    status: [409],
    about: 'The recording’s audio is not available (yet, or the carrier could not give it). `detail` says which.',
  },
  last_api_key: {
    status: [409],
    about:
      'This is the account’s last key that does not expire: revoking it would leave no way into the API. Create or ' +
      'roll another key first, or send force=true.',
  },

  // The server's side
  carrier_unavailable: {
    status: [503],
    about: 'The carrier could not be asked (it did not answer in time). Retry after Retry-After seconds.',
  },
  service_unavailable: {
    status: [503],
    about: 'The database is briefly unavailable. Retry after Retry-After seconds; nothing was changed.',
  },
  internal_error: {
    status: [500],
    about: 'Something went wrong on Handset’s side; the details are in its log. Retry, and report it if it persists.',
  },
} as const satisfies Record<string, ErrorDoc>;

export type ErrorCode = keyof typeof ERROR_CODES;

export const isErrorCode = (code: unknown): code is ErrorCode =>
  typeof code === 'string' && Object.hasOwn(ERROR_CODES, code);

/** Where a code is explained: a page the API serves itself, so every problem's `type` resolves. */
export const ERRORS_PAGE = '/docs/errors';
export const errorType = (code: ErrorCode) => `${ERRORS_PAGE}#${code}`;
