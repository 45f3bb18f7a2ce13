// HTTP/1.1 over a bare TCP socket, for requests that fetch refuses to send:
// arbitrary header bytes (CR, NUL, obs-text, duplicates), lying content-length,
// trickled or never-finished bodies, header floods. One connection per request
// (`connection: close`); the answer is parsed just enough to assert on.

import net from 'node:net';

export interface RawAnswer {
  /** null when the server closed the connection without an HTTP answer. */
  status: number | null;
  headers: Record<string, string>;
  body: string;
  /** ms from connect until the server closed the connection (or we gave up). */
  closedAfterMs: number;
  /** true when the server closed (or reset) the connection; false when we gave up waiting. */
  closedByServer: boolean;
}

export interface RawRequest {
  method?: string;
  path?: string;
  /** Header lines as [name, value] pairs, written byte for byte (values may be Buffers). */
  headers?: [string, string | Buffer][];
  body?: Buffer | string;
  /** Add `content-length: <body length>` (default true when there is a body and no content-length header). */
  contentLength?: boolean;
  /** Give up (and destroy the socket) after this many ms; default 5000. */
  timeoutMs?: number;
}

export function urlParts(url: string): { host: string; port: number; path: string } {
  const u = new URL(url);
  return { host: u.hostname, port: Number(u.port), path: u.pathname + u.search };
}

/** The bytes of a request head: request line, header lines, blank line. */
export function requestHead(method: string, path: string, headers: [string, string | Buffer][]): Buffer {
  const parts: Buffer[] = [Buffer.from(`${method} ${path} HTTP/1.1\r\n`, 'latin1')];
  for (const [name, value] of headers) {
    parts.push(
      Buffer.from(`${name}: `, 'latin1'),
      typeof value === 'string' ? Buffer.from(value, 'latin1') : value,
      Buffer.from('\r\n'),
    );
  }
  parts.push(Buffer.from('\r\n'));
  return Buffer.concat(parts);
}

/** Sends one request and reads until the server closes the connection. */
export function rawRequest(baseUrl: string, req: RawRequest): Promise<RawAnswer> {
  const { host, port, path: basePath } = urlParts(baseUrl);
  const body =
    req.body === undefined ? undefined : Buffer.isBuffer(req.body) ? req.body : Buffer.from(req.body, 'utf8');
  const headers: [string, string | Buffer][] = [
    ['host', `${host}:${port}`],
    ['connection', 'close'],
    ...(req.headers ?? []),
  ];
  const hasLength = headers.some(([n]) => n.toLowerCase() === 'content-length');
  if (body !== undefined && (req.contentLength ?? !hasLength)) headers.push(['content-length', String(body.length)]);
  const head = requestHead(req.method ?? 'POST', req.path ?? basePath, headers);
  return exchange(
    host,
    port,
    (socket) => {
      socket.write(body ? Buffer.concat([head, body]) : head);
    },
    req.timeoutMs ?? 5000,
  );
}

/**
 * Opens a connection, lets `drive` write to it (at any pace), and resolves when
 * the server closes it or after `timeoutMs`.
 */
export function exchange(
  host: string,
  port: number,
  drive: (socket: net.Socket) => void,
  timeoutMs: number,
): Promise<RawAnswer> {
  return new Promise((resolve) => {
    const started = performance.now();
    const chunks: Buffer[] = [];
    const socket = net.connect(port, host);
    let done = false;
    const finish = (closedByServer: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      resolve({ ...parseAnswer(Buffer.concat(chunks)), closedAfterMs: performance.now() - started, closedByServer });
    };
    const timer = setTimeout(() => finish(false), timeoutMs);
    socket.on('connect', () => drive(socket));
    socket.on('data', (c: Buffer) => chunks.push(c));
    socket.on('end', () => finish(true));
    socket.on('close', () => finish(true));
    socket.on('error', () => finish(true)); // EPIPE/ECONNRESET: the server hung up on us
  });
}

export function parseAnswer(raw: Buffer): Pick<RawAnswer, 'status' | 'headers' | 'body'> {
  // skip interim answers (100 Continue after `expect: 100-continue`)
  const interim = /^HTTP\/1\.[01] 1\d\d[^\r\n]*\r\n(?:[^\r\n]+\r\n)*\r\n/.exec(raw.toString('latin1'));
  if (interim) return parseAnswer(raw.subarray(Buffer.byteLength(interim[0], 'latin1')));
  const text = raw.toString('latin1');
  const m = /^HTTP\/1\.[01] (\d{3})[^\r\n]*\r\n/.exec(text);
  if (!m) return { status: null, headers: {}, body: text };
  const end = text.indexOf('\r\n\r\n');
  const headers: Record<string, string> = {};
  for (const line of text.slice(m[0].length, end < 0 ? undefined : end).split('\r\n')) {
    const i = line.indexOf(':');
    if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  let body = end < 0 ? '' : raw.subarray(Buffer.byteLength(text.slice(0, end + 4), 'latin1')).toString('utf8');
  const length = Number(headers['content-length']);
  if (Number.isInteger(length)) body = Buffer.from(body, 'utf8').subarray(0, length).toString('utf8');
  return { status: Number(m[1]), headers, body };
}
