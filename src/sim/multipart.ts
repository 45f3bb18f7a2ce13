// Reads a multipart/form-data body (RFC 7578), for the one simulated route that
// takes uploads (speech-to-text): the boundary from the content-type, then each
// part's Content-Disposition name and filename, its Content-Type and its bytes,
// untouched. Small on purpose: no streaming (the body is already in memory under
// the route's size limit), no nested multipart, no RFC 5987 `filename*`.

export interface FormPart {
  name: string;
  /** Present for a file part (possibly ""); null for a plain field. */
  filename: string | null;
  contentType: string | null;
  data: Buffer;
}

export class MultipartError extends Error {
  override name = 'MultipartError';
}

/** The boundary of a multipart/form-data content-type, or null when it is not one. */
export function formBoundary(contentType: string | undefined): string | null {
  if (contentType === undefined) return null;
  const [type, ...params] = contentType.split(';');
  if (type?.trim().toLowerCase() !== 'multipart/form-data') return null;
  for (const param of params) {
    const eq = param.indexOf('=');
    if (eq < 0 || param.slice(0, eq).trim().toLowerCase() !== 'boundary') continue;
    let value = param.slice(eq + 1).trim();
    if (value.startsWith('"') && value.endsWith('"') && value.length >= 2) value = value.slice(1, -1);
    // RFC 2046: 1 to 70 characters.
    return value.length >= 1 && value.length <= 70 ? value : null;
  }
  return null;
}

export function parseMultipart(body: Buffer, boundary: string): FormPart[] {
  const delimiter = Buffer.from(`--${boundary}`, 'latin1');
  // Every delimiter after the first starts on a new line, which belongs to it, not to the part before.
  const next = Buffer.from(`\r\n--${boundary}`, 'latin1');
  const first = body.indexOf(delimiter);
  if (first < 0) throw new MultipartError('the body does not contain the boundary of its content-type');
  const parts: FormPart[] = [];
  let pos = first + delimiter.length;
  for (;;) {
    if (body.toString('latin1', pos, pos + 2) === '--') return parts;
    // Transport padding after a delimiter, then its line break.
    while (body[pos] === 0x20 || body[pos] === 0x09) pos++;
    if (body.toString('latin1', pos, pos + 2) !== '\r\n') throw new MultipartError('a boundary line is malformed');
    pos += 2;
    const headerEnd = body.indexOf('\r\n\r\n', pos, 'latin1');
    // A part with no header lines at all starts with its blank line.
    const bare = body.toString('latin1', pos, pos + 2) === '\r\n';
    if (headerEnd < 0 && !bare) throw new MultipartError('a part has no end to its headers');
    const headerText = bare ? '' : body.toString('utf8', pos, headerEnd);
    const start = bare ? pos + 2 : headerEnd + 4;
    const end = body.indexOf(next, start);
    if (end < 0) throw new MultipartError('the body ends before its closing boundary');
    parts.push(readPart(headerText, body.subarray(start, end)));
    pos = end + next.length;
  }
}

function readPart(headerText: string, data: Buffer): FormPart {
  let disposition: string | null = null;
  let contentType: string | null = null;
  for (const line of headerText.split('\r\n')) {
    if (line === '') continue;
    const colon = line.indexOf(':');
    if (colon < 0) throw new MultipartError(`a part header is malformed: "${line}"`);
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    if (name === 'content-disposition') disposition = value;
    else if (name === 'content-type') contentType = value;
  }
  if (disposition === null) throw new MultipartError('a part has no Content-Disposition');
  const [kind, ...rest] = splitParams(disposition);
  if (kind?.toLowerCase() !== 'form-data') throw new MultipartError('a part is not form-data');
  let name: string | null = null;
  let filename: string | null = null;
  for (const param of rest) {
    const eq = param.indexOf('=');
    if (eq < 0) continue;
    const key = param.slice(0, eq).trim().toLowerCase();
    const value = unquote(param.slice(eq + 1).trim());
    if (key === 'name') name = value;
    else if (key === 'filename') filename = value;
  }
  if (name === null) throw new MultipartError('a part has no name');
  return { name, filename, contentType, data };
}

/** Splits on the semicolons outside quoted strings. */
function splitParams(value: string): string[] {
  const out: string[] = [];
  let current = '';
  let quoted = false;
  for (let i = 0; i < value.length; i++) {
    const c = value[i]!;
    if (quoted && c === '\\' && i + 1 < value.length) {
      current += c + value[++i];
      continue;
    }
    if (c === '"') quoted = !quoted;
    if (c === ';' && !quoted) {
      out.push(current.trim());
      current = '';
    } else current += c;
  }
  out.push(current.trim());
  return out;
}

function unquote(value: string): string {
  if (value.length >= 2 && value.startsWith('"') && value.endsWith('"')) {
    return value.slice(1, -1).replace(/\\(.)/g, '$1');
  }
  return value;
}
