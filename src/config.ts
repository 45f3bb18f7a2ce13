// Config is the one typed, validated view of the environment. It is
// read once at start-up by the CLI and passed down; nothing else reads process.env.
// A bad value stops start-up with one line that names the variable.

import { isIP } from 'node:net';
import path from 'node:path';

export type Mode = 'dev' | 'serve';

/** The roles a Handset process can run (handset serve --roles); each has settings below. */
export const ROLES = ['ingest', 'api', 'worker'] as const;
export type Role = (typeof ROLES)[number];

export interface Config {
  mode: Mode;
  /** PostgreSQL connection string; null means "start an embedded PostgreSQL" (dev/test only). */
  databaseUrl: string | null;
  /** Bind address of both HTTP servers. Defaults to 127.0.0.1 in dev, 0.0.0.0 in serve. */
  host: string;
  /** Customer REST API port (0 = any free port). Defaults to 3000. */
  apiPort: number;
  /** Carrier webhook receiver port (0 = any free port). Defaults to 3001. */
  ingestPort: number;
  /** Dev mode: the Telnyx simulator's port (0 = any free port). Defaults to 3002. */
  simPort: number;
  /** An OpenAI-compatible speech-to-text endpoint (Telnyx's by default) for transcribe calls. */
  transcription: {
    /** POST …/audio/transcriptions; null: the carrier API's own (TELNYX_API_URL + /ai/audio/transcriptions). */
    url: string | null;
    model: string;
    /** null: TELNYX_API_KEY. */
    apiKey: string | null;
    /** Delays before each retry of a 5xx, 429 or unanswered request; a 4xx is final. */
    retrySchedule: number[];
  };
  telnyx: {
    /** Base64 of the raw 32-byte Ed25519 public key, as Mission Control shows it. */
    publicKey: string | null;
    /** Bearer key for the Telnyx REST API. */
    apiKey: string | null;
    /** Defaults to https://api.telnyx.com/v2. */
    apiUrl: string;
    /** Call Control application id used for POST /calls. */
    connectionId: string | null;
    /** Optional, sent with POST /messages. */
    messagingProfileId: string | null;
  };
  /** Twilio as a second carrier (messaging); null when TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN are not set. */
  twilio: {
    accountSid: string;
    authToken: string;
    /** Defaults to https://api.twilio.com. */
    apiUrl: string;
  } | null;
  /**
   * The ingest base URL as the carriers reach it (behind a proxy, its public
   * https URL): Twilio signs the full URL it calls, and sends' StatusCallback
   * points here. Null: http://<HANDSET_HOST>:<HANDSET_INGEST_PORT> (the ingest's
   * own address once it listens, in a process that runs it).
   */
  publicIngestUrl: string | null;
  /**
   * A carrier is marked down after `downAfter` requests in a row it certainly did
   * not take (refused connections, answers it defines as not processed): no
   * request is made to it for `retryAfterMs`, then one request probes it.
   * Defaults: 3 and 10 s (dev: 5 s).
   */
  carrierHealth: { downAfter: number; retryAfterMs: number };
  /** How long a request to a carrier's REST API may take before its outcome counts as unknown. Defaults to 10 s. */
  carrierTimeoutMs: number;
  /**
   * How queued messages reach the carrier: `batched` (the default: a dispatcher
   * claims the line many at a time) or `jobs` (one job per message, the path
   * before it; kept as the bench's baseline). The api and worker roles must agree.
   */
  dispatch: DispatchMode;
  /**
   * Carrier requests the batched dispatcher has in flight at once per worker
   * process (a carrier account's concurrency limit, divided by the workers).
   * Defaults to DEFAULT_DISPATCH_CONCURRENCY.
   */
  dispatchConcurrency: number;
  /** Carrier signature timestamp tolerance, both directions. Defaults to 300 s. */
  webhookToleranceSeconds: number;
  /** Delays before each retry of a customer webhook delivery, in ms; its length is the retry count. */
  deliveryRetrySchedule: number[];
  /** A customer webhook attempt that takes longer fails, in ms. Defaults to 15 s. */
  deliveryTimeoutMs: number;
  /** Consecutive failed attempts after which an endpoint is disabled. Defaults to 100. */
  endpointDisableAfter: number;
  /** Allow customer endpoints on loopback/private addresses. Defaults to false (dev: true). */
  allowPrivateWebhookUrls: boolean;
  /** Jobs run at once per worker process: carrier events, sends, dials, call commands. Defaults to 10. */
  workerConcurrency: number;
  /**
   * Customer webhook attempts run at once per worker process, in capacity of their
   * own, so a customer's slow endpoints never delay carrier events. An attempt in
   * flight holds a socket, not a database connection. Defaults to DEFAULT_DELIVERY_CONCURRENCY.
   */
  deliveryConcurrency: number;
  /**
   * Of those, at most this many for one account at a time (and half as many for one
   * endpoint); and the accounts whose attempts may hang share this many among them
   * beyond their first slot each, so the rest of the slots stay for accounts with
   * nothing in flight and endpoints that answer fast (delivery/capacity.ts). Defaults to half.
   */
  deliveryPerAccount: number;
  /** Webhook endpoints one account may have. Defaults to 50. */
  endpointsPerAccount: number;
  /** Keys that encrypt webhook signing secrets at rest: the first encrypts, all decrypt. Null: not set. */
  secretKeys: Buffer[] | null;
  /** Processed raw carrier events older than this are deleted, in ms. Defaults to 30 days. */
  carrierEventRetentionMs: number;
  /**
   * The crash-recovery bound, in ms: a job whose worker died, or whose outcome could
   * not be recorded, runs again within about this long. Defaults to 30 s.
   */
  workerStaleAfterMs: number;
  /** How often the worker looks for resources waiting past their bound for a carrier event. Defaults to 1 min. */
  reconcileIntervalMs: number;
  /**
   * How long past its expected moment (the ring timeout, the hangup) a call may
   * wait for a carrier event before the carrier is asked. Defaults to 60 s.
   */
  reconcileAfterMs: number;
  /** How long a sent message may wait for its terminal receipt before the carrier is asked. Defaults to 1 h. */
  reconcileMessageAfterMs: number;
  /** Requests per second one API key may make before 429, across all API processes. Defaults to 100. */
  apiRateLimit: number;
  /**
   * Requests per second one client address may make to the API before 429,
   * counted before authentication (so a flood of made-up keys costs no lookups
   * beyond it), across all API processes. Defaults to 1000.
   */
  addressRateLimit: number;
  /**
   * How many API processes share the traffic: each counts its own requests and
   * allows 1/apiReplicas of both limits, so N replicas behind a balancer never
   * allow N × the limit. Defaults to 1.
   */
  apiReplicas: number;
  /**
   * Addresses and CIDRs of the proxies in front of the API whose X-Forwarded-For
   * is believed (the client is the last address in it that is not one of them).
   * Defaults to none: the peer's own address is the client's.
   */
  trustedProxies: string[];
  /** A carrier webhook body larger than this is refused with 413, in bytes. Defaults to 256 KiB. */
  ingestBodyLimit: number;
  /**
   * HTTP connections each role's server keeps open at once; a connection beyond
   * it is closed as soon as it is accepted. Defaults to 256 (ingest) and 1024 (API).
   */
  maxConnections: { ingest: number; api: number };
  /** Verified webhooks that may wait for the next write; beyond it 503 at once. Defaults to 400. */
  ingestQueueLimit: number;
  /**
   * statement_timeout and lock_timeout of each role's database connections, in ms
   * (0: the database's own setting). Ingest's stay under the carrier's 2 s answer
   * deadline, so a blocked write is answered 503 rather than cut off. Defaults:
   * ingest 1 s and 500 ms, API 5 s and 2 s, worker 30 s and 10 s.
   */
  databaseTimeouts: Record<'ingest' | 'api' | 'worker', { statementMs: number; lockMs: number }>;
  /** When set, GET /metrics needs `Authorization: Bearer <token>` on every role. Defaults to unset (open). */
  metricsToken: string | null;
  /** pino log level. Defaults to info. */
  logLevel: string;
  /** Where dev mode keeps its state (embedded PostgreSQL, demo credentials). Defaults to ./.handset. */
  stateDir: string;
}

export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super(`${variable}: ${message}`);
    this.name = 'ConfigError';
  }
}

const DEFAULT_RETRY_SCHEDULE = '5s,5m,30m,2h,5h,10h,14h,20h';
/** Where dev mode keeps its state unless HANDSET_STATE_DIR says otherwise: in the working directory (the checkout). */
export const DEFAULT_STATE_DIR = '.handset';
/** Customer webhook attempts in flight per worker process unless HANDSET_DELIVERY_CONCURRENCY says otherwise. */
export const DEFAULT_DELIVERY_CONCURRENCY = 32;
/** Carrier requests the batched dispatcher has in flight per worker process unless HANDSET_DISPATCH_CONCURRENCY says otherwise. */
export const DEFAULT_DISPATCH_CONCURRENCY = 32;
export const DISPATCH_MODES = ['batched', 'jobs'] as const;
export type DispatchMode = (typeof DISPATCH_MODES)[number];

const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

/** Parses "262144", "256KiB", "1MiB" into bytes. */
export function parseSize(text: string): number | null {
  const m = /^(\d+)(B|KiB|MiB)?$/.exec(text.trim());
  if (!m) return null;
  return Number(m[1]) * { B: 1, KiB: 1024, MiB: 1024 * 1024 }[(m[2] ?? 'B') as 'B' | 'KiB' | 'MiB'];
}

/**
 * Text that may hold a URL or connection string, as it can be shown: the user
 * info's password (or a user info without one, which may be a token) and any
 * password-like parameter replaced by ***. Greedy up to the last @, so a password
 * with an unescaped @ or / (the reason such a URL does not parse) is hidden whole.
 */
export function redactCredentials(text: string): string {
  return text
    .replace(/([a-z][a-z0-9+.-]*:\/\/)([^\s"]*)@/gi, (_m, scheme: string, userinfo: string) => {
      const colon = userinfo.indexOf(':');
      return `${scheme}${colon < 0 ? '***' : `${userinfo.slice(0, colon)}:***`}@`;
    })
    .replace(/\b(password|passwd|pwd|sslpassword|secret|token|api_?key)=([^&\s"]*)/gi, '$1=***');
}

const DURATION_UNITS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/** Parses "250ms", "5s", "5m", "2h", "30d" into milliseconds. */
export function parseDuration(text: string): number | null {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/.exec(text.trim());
  if (!m) return null;
  return Math.round(Number(m[1]) * DURATION_UNITS[m[2] as keyof typeof DURATION_UNITS]);
}

/** Milliseconds as a duration parseDuration reads back, in the largest unit that holds it whole: "1h", "90s". */
export function formatDuration(ms: number): string {
  const units = Object.entries(DURATION_UNITS).reverse();
  const [unit, size] = units.find(([, size]) => ms % size === 0) ?? ['ms', 1];
  return `${ms / size}${unit}`;
}

export function loadConfig(env: NodeJS.ProcessEnv, mode: Mode): Config {
  const dev = mode === 'dev';
  const str = (name: string): string | null => {
    const v = env[name];
    return v === undefined || v.trim() === '' ? null : v.trim();
  };
  const int = (name: string, fallback: number, min: number, max: number): number => {
    const v = str(name);
    if (v === null) return fallback;
    if (!/^\d+$/.test(v) || Number(v) < min || Number(v) > max) {
      throw new ConfigError(name, `must be an integer from ${min} to ${max}, got "${v}"`);
    }
    return Number(v);
  };
  const bool = (name: string, fallback: boolean): boolean => {
    const v = str(name);
    if (v === null) return fallback;
    if (['true', '1', 'yes'].includes(v.toLowerCase())) return true;
    if (['false', '0', 'no'].includes(v.toLowerCase())) return false;
    throw new ConfigError(name, `must be true or false, got "${v}"`);
  };
  const duration = (name: string, fallback: string): number => {
    const v = str(name) ?? fallback;
    const ms = parseDuration(v);
    if (ms === null || ms <= 0) throw new ConfigError(name, `must be a duration such as 30s, 5m or 30d, got "${v}"`);
    return ms;
  };
  const url = (name: string, fallback: string | null): string | null => {
    const v = str(name) ?? fallback;
    if (v === null) return null;
    try {
      const u = new URL(v);
      if (!['http:', 'https:', 'postgres:', 'postgresql:'].includes(u.protocol)) throw new Error();
    } catch {
      throw new ConfigError(name, `must be a URL, got "${redactCredentials(v)}"`);
    }
    return v.replace(/\/+$/, '');
  };

  const databaseUrl = url('DATABASE_URL', null);
  if (databaseUrl && !/^postgres(ql)?:/.test(databaseUrl)) {
    throw new ConfigError('DATABASE_URL', 'must be a postgres:// connection string');
  }

  const twilioSid = str('TWILIO_ACCOUNT_SID');
  const twilioToken = str('TWILIO_AUTH_TOKEN');
  if ((twilioSid === null) !== (twilioToken === null)) {
    throw new ConfigError(
      twilioSid === null ? 'TWILIO_ACCOUNT_SID' : 'TWILIO_AUTH_TOKEN',
      'TWILIO_ACCOUNT_SID and TWILIO_AUTH_TOKEN are set together or not at all',
    );
  }
  if (twilioSid !== null && !/^AC[0-9a-fA-F]{32}$/.test(twilioSid)) {
    throw new ConfigError('TWILIO_ACCOUNT_SID', 'must be an account SID: AC followed by 32 hex digits');
  }

  const publicKey = str('TELNYX_PUBLIC_KEY');
  if (publicKey !== null && Buffer.from(publicKey, 'base64').length !== 32) {
    throw new ConfigError('TELNYX_PUBLIC_KEY', 'must be the base64 of a raw 32-byte Ed25519 public key');
  }

  /** A comma-separated list of delays (a retry schedule), at most `max` of them. */
  const schedule = (name: string, fallback: string, max: number): number[] => {
    const delays = (str(name) ?? fallback).split(',').map((part) => {
      const ms = parseDuration(part);
      if (ms === null) throw new ConfigError(name, `"${part}" is not a duration (units ms, s, m, h)`);
      return ms;
    });
    if (delays.length > max) throw new ConfigError(name, `at most ${max} retries`);
    return delays;
  };
  const deliveryRetrySchedule = schedule('HANDSET_DELIVERY_RETRY_SCHEDULE', DEFAULT_RETRY_SCHEDULE, 8);
  const transcriptionRetrySchedule = schedule('HANDSET_TRANSCRIPTION_RETRY_SCHEDULE', '5s,30s,2m,10m,30m', 20);

  const deliveryConcurrency = int('HANDSET_DELIVERY_CONCURRENCY', DEFAULT_DELIVERY_CONCURRENCY, 1, 1000);

  const size = (name: string, fallback: string, min: number, max: number): number => {
    const v = str(name) ?? fallback;
    const bytes = parseSize(v);
    if (bytes === null || bytes < min || bytes > max) {
      throw new ConfigError(name, `must be a size from ${min} to ${max} bytes (units KiB, MiB), got "${v}"`);
    }
    return bytes;
  };
  // 0 turns a timeout off (the database's own setting applies).
  const timeout = (name: string, fallback: string): number => {
    const v = str(name) ?? fallback;
    const ms = v === '0' ? 0 : parseDuration(v);
    if (ms === null) {
      throw new ConfigError(name, `must be a duration such as 500ms or 5s (0: off), got "${v}"`);
    }
    return ms;
  };
  const timeouts = (role: 'INGEST' | 'API' | 'WORKER', statement: string, lock: string) => {
    const statementMs = timeout(`HANDSET_${role}_STATEMENT_TIMEOUT`, statement);
    const lockMs = timeout(`HANDSET_${role}_LOCK_TIMEOUT`, lock);
    if (statementMs > 0 && lockMs > statementMs) {
      throw new ConfigError(`HANDSET_${role}_LOCK_TIMEOUT`, `must not exceed HANDSET_${role}_STATEMENT_TIMEOUT`);
    }
    return { statementMs, lockMs };
  };

  const metricsToken = str('HANDSET_METRICS_TOKEN');
  if (metricsToken !== null && !/^[\x21-\x7e]{16,}$/.test(metricsToken)) {
    throw new ConfigError('HANDSET_METRICS_TOKEN', 'must be at least 16 printable characters without spaces');
  }

  const dispatch = (str('HANDSET_DISPATCH') ?? 'batched') as DispatchMode;
  if (!DISPATCH_MODES.includes(dispatch)) {
    throw new ConfigError('HANDSET_DISPATCH', `must be one of ${DISPATCH_MODES.join(', ')}, got "${dispatch}"`);
  }

  const logLevel = str('LOG_LEVEL') ?? 'info';
  if (!LOG_LEVELS.includes(logLevel)) {
    throw new ConfigError('LOG_LEVEL', `must be one of ${LOG_LEVELS.join(', ')}, got "${logLevel}"`);
  }

  return {
    mode,
    databaseUrl,
    host: str('HANDSET_HOST') ?? (dev ? '127.0.0.1' : '0.0.0.0'),
    apiPort: int('HANDSET_API_PORT', 3000, 0, 65535),
    ingestPort: int('HANDSET_INGEST_PORT', 3001, 0, 65535),
    simPort: int('HANDSET_SIM_PORT', 3002, 0, 65535),
    transcription: {
      url: url('HANDSET_TRANSCRIPTION_URL', null),
      model: str('HANDSET_TRANSCRIPTION_MODEL') ?? 'distil-whisper/distil-large-v2',
      apiKey: str('HANDSET_TRANSCRIPTION_API_KEY'),
      retrySchedule: transcriptionRetrySchedule,
    },
    telnyx: {
      publicKey,
      apiKey: str('TELNYX_API_KEY'),
      apiUrl: url('TELNYX_API_URL', 'https://api.telnyx.com/v2') as string,
      connectionId: str('TELNYX_CONNECTION_ID'),
      messagingProfileId: str('TELNYX_MESSAGING_PROFILE_ID'),
    },
    twilio:
      twilioSid !== null && twilioToken !== null
        ? {
            accountSid: twilioSid,
            authToken: twilioToken,
            apiUrl: url('TWILIO_API_URL', 'https://api.twilio.com') as string,
          }
        : null,
    publicIngestUrl: url('HANDSET_PUBLIC_INGEST_URL', null),
    carrierHealth: {
      downAfter: int('HANDSET_CARRIER_DOWN_AFTER', 3, 1, 1000),
      retryAfterMs: duration('HANDSET_CARRIER_RETRY_AFTER', dev ? '5s' : '10s'),
    },
    carrierTimeoutMs: duration('HANDSET_CARRIER_TIMEOUT', '10s'),
    dispatch,
    dispatchConcurrency: int('HANDSET_DISPATCH_CONCURRENCY', DEFAULT_DISPATCH_CONCURRENCY, 1, 1000),
    webhookToleranceSeconds: int('HANDSET_WEBHOOK_TOLERANCE_SECONDS', 300, 1, 86_400),
    deliveryRetrySchedule,
    deliveryTimeoutMs: duration('HANDSET_DELIVERY_TIMEOUT', '15s'),
    endpointDisableAfter: int('HANDSET_ENDPOINT_DISABLE_AFTER', 100, 1, 1_000_000),
    allowPrivateWebhookUrls: bool('HANDSET_ALLOW_PRIVATE_WEBHOOK_URLS', dev),
    workerConcurrency: int('HANDSET_WORKER_CONCURRENCY', 10, 1, 1000),
    deliveryConcurrency,
    deliveryPerAccount: int(
      'HANDSET_DELIVERY_PER_ACCOUNT',
      Math.max(1, Math.floor(deliveryConcurrency / 2)),
      1,
      deliveryConcurrency,
    ),
    endpointsPerAccount: int('HANDSET_ENDPOINTS_PER_ACCOUNT', 50, 1, 10_000),
    secretKeys: secretKeys(str('HANDSET_SECRET_KEY')),
    carrierEventRetentionMs: duration('HANDSET_CARRIER_EVENT_RETENTION', '30d'),
    // 30 s: with a heartbeat every 7.5 s and a sweep every 10 s, a dial job whose worker
    // died after the carrier accepted it runs again within ~45 s, inside the 60 s in
    // which Telnyx ignores the repeated command_id (so the target is not dialed twice).
    workerStaleAfterMs: duration('HANDSET_WORKER_STALE_AFTER', '30s'),
    // Dev mode asks sooner, so a lost webhook is seen recovered while one watches.
    reconcileIntervalMs: duration('HANDSET_RECONCILE_INTERVAL', dev ? '5s' : '1m'),
    reconcileAfterMs: duration('HANDSET_RECONCILE_AFTER', dev ? '10s' : '60s'),
    reconcileMessageAfterMs: duration('HANDSET_RECONCILE_MESSAGE_AFTER', dev ? '1m' : '1h'),
    apiRateLimit: int('HANDSET_API_RATE_LIMIT', 100, 1, 1_000_000),
    addressRateLimit: int('HANDSET_ADDRESS_RATE_LIMIT', 1000, 1, 1_000_000),
    apiReplicas: int('HANDSET_API_REPLICAS', 1, 1, 10_000),
    trustedProxies: trustedProxies(str('HANDSET_TRUSTED_PROXIES')),
    // Telnyx bodies are a few kilobytes; an MMS with many media URLs stays far below this.
    ingestBodyLimit: size('HANDSET_INGEST_BODY_LIMIT', '256KiB', 1024, 16 * 1024 * 1024),
    maxConnections: {
      ingest: int('HANDSET_INGEST_MAX_CONNECTIONS', 256, 1, 1_000_000),
      api: int('HANDSET_API_MAX_CONNECTIONS', 1024, 1, 1_000_000),
    },
    ingestQueueLimit: int('HANDSET_INGEST_QUEUE_LIMIT', 400, 1, 1_000_000),
    databaseTimeouts: {
      ingest: timeouts('INGEST', '1s', '500ms'),
      api: timeouts('API', '5s', '2s'),
      worker: timeouts('WORKER', '30s', '10s'),
    },
    metricsToken,
    logLevel,
    stateDir: path.resolve(str('HANDSET_STATE_DIR') ?? DEFAULT_STATE_DIR),
  };
}

/** HANDSET_SECRET_KEY: comma-separated base64 of 32 random bytes each. */
function secretKeys(v: string | null): Buffer[] | null {
  if (v === null) return null;
  return v.split(',').map((part, i) => {
    const key = Buffer.from(part.trim(), 'base64');
    if (key.length !== 32 || !/^[A-Za-z0-9+/]+={0,2}$/.test(part.trim())) {
      throw new ConfigError('HANDSET_SECRET_KEY', `key ${i + 1} must be the base64 of 32 random bytes`);
    }
    return key;
  });
}

/** HANDSET_TRUSTED_PROXIES: comma-separated IPv4/IPv6 addresses or CIDRs (10.0.0.0/8, fd00::/8). */
function trustedProxies(v: string | null): string[] {
  if (v === null) return [];
  return v.split(',').map((part) => {
    const entry = part.trim();
    const [address = '', bits, extra] = entry.split('/');
    const family = isIP(address);
    const max = family === 4 ? 32 : 128;
    if (
      family === 0 ||
      extra !== undefined ||
      (bits !== undefined && (!/^\d{1,3}$/.test(bits) || Number(bits) > max))
    ) {
      throw new ConfigError(
        'HANDSET_TRUSTED_PROXIES',
        `"${entry}" is not an IP address or CIDR (e.g. 10.0.0.1, 10.0.0.0/8, fd00::/8)`,
      );
    }
    return entry;
  });
}
