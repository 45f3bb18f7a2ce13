// How the simulated carrier says no: Telnyx's REST error body
// {"errors":[{"code","title","detail","source"?}]} (code a string) with the HTTP
// status and code Telnyx uses for each case. Where Telnyx's documentation
// names no code for a case (answering an outgoing leg, an unsupported action, the
// Idempotency-Key conflicts, whose statuses Telnyx documents but not their codes),
// the simulator answers 10015 "Bad Request" with a detail saying what was wrong.

export interface TelnyxErrorItem {
  code: string;
  title: string;
  detail: string;
  source?: { pointer: string };
}

export interface Refusal {
  ok: false;
  status: number;
  errors: TelnyxErrorItem[];
  headers?: Record<string, string>;
}

export type Outcome<T> = { ok: true; data: T; deduplicated?: boolean } | Refusal;

function refusal(status: number, code: string, title: string, detail: string, pointer?: string): Refusal {
  const item: TelnyxErrorItem = { code, title, detail };
  if (pointer) item.source = { pointer };
  return { ok: false, status, errors: [item] };
}

export const refuse = {
  authentication: () =>
    refusal(401, '10009', 'Authentication failed', 'Could not understand the provided credentials.'),
  notFound: (path: string) =>
    refusal(404, '10005', 'Resource not found', `The requested resource or URL could not be found: ${path}`),
  malformedBody: (detail: string) => refusal(400, '10015', 'Bad Request', detail),
  missing: (param: string) =>
    refusal(
      422,
      '10004',
      'Missing required parameter',
      `The '${param}' parameter is required and cannot be blank.`,
      `/${param}`,
    ),
  badParameter: (param: string, detail: string) => refusal(422, '10015', 'Bad Request', detail, `/${param}`),
  badRequest: (detail: string) => refusal(422, '10015', 'Bad Request', detail),
  notE164: (param: string) =>
    refusal(
      422,
      '10016',
      'Phone number must be in +E164 format',
      `The '${param}' parameter must be a phone number in +E.164 format.`,
      `/${param}`,
    ),
  invalidTo: (detail = "The 'to' address is not a valid, reachable destination.") =>
    refusal(422, '40310', "Invalid 'to'", detail, '/to'),
  invalidFrom: () =>
    refusal(
      422,
      '40305',
      "Invalid 'from'",
      "The 'from' address is not a phone number, short code or alphanumeric sender ID.",
      '/from',
    ),
  blocked: (from: string, to: string) =>
    refusal(
      403,
      '40300',
      'Blocked due to STOP message',
      `Messages cannot be sent from '${from}' to '${to}' due to an existing block rule.`,
      '/to',
    ),
  dialRefused: () =>
    refusal(
      403,
      '10010',
      'Authorization failed',
      'Calls to this destination are not allowed by the outbound voice profile.',
      '/to',
    ),
  rateLimited: (retryAfterSeconds: number): Refusal => ({
    ...refusal(429, '10011', 'Too many requests', 'You have exceeded the maximum number of allowed requests.'),
    headers: {
      'retry-after': String(retryAfterSeconds),
      'x-ratelimit-limit': '100',
      'x-ratelimit-remaining': '0',
      'x-ratelimit-reset': String(retryAfterSeconds),
    },
  }),
  serverError: (status: 500 | 503) =>
    refusal(status, '10007', 'Unexpected error', 'An unexpected error occurred. Please try again.'),
  invalidCallControlId: () =>
    refusal(
      422,
      '90015',
      'Invalid Call Control ID',
      'The call_control_id does not identify a call.',
      '/call_control_id',
    ),
  callEnded: () =>
    refusal(422, '90018', 'Call has already ended', 'This call is no longer active and can not receive commands.'),
  notAnswered: () => refusal(422, '90034', 'Call not answered yet', 'This command needs an answered call.'),
  badIdempotencyKey: () =>
    refusal(400, '10015', 'Bad Request', "The Idempotency-Key header must be 1-255 letters, digits, '-', '_' or ':'."),
  idempotencyKeyInUse: () =>
    refusal(409, '10015', 'Bad Request', 'A request with this Idempotency-Key is still in progress; retry it later.'),
  idempotencyKeyReused: () =>
    refusal(422, '10015', 'Bad Request', 'This Idempotency-Key was already used with a different request.'),
};

/** The body Telnyx answers with. */
export function errorBody(r: Refusal): { errors: TelnyxErrorItem[] } {
  return { errors: r.errors };
}
