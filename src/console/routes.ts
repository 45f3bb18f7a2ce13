// Serves the web console at /console on the api role: its own HTML, CSS and ES
// modules (src/console/web) and Preact and htm straight from their npm packages,
// so it works offline with no bundler and no CDN. The console is a client of the
// public /v1 API and nothing else; these routes only hand out files. Every file is
// read once at start-up into a fixed table: a path not in it is 404, so nothing on
// disk beyond that table can be reached. Paths under /console that name no file
// are the console's own pages and get its HTML.

import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { problem, sendProblem } from '../api/problem.js';

export const CONSOLE_PATH = '/console';

/** The console's own files, beside this module's source (the same folder from src/ and from dist/). */
const WEB_DIR = fileURLToPath(new URL('../../src/console/web/', import.meta.url));

/** The modules the console imports by bare name, and the file of the npm package each one is. */
const VENDOR = [
  { specifier: 'preact', pkg: 'preact', file: 'dist/preact.mjs' },
  { specifier: 'preact/hooks', pkg: 'preact', file: 'hooks/dist/hooks.mjs' },
  { specifier: 'htm', pkg: 'htm', file: 'dist/htm.module.js' },
  { specifier: 'htm/preact', pkg: 'htm', file: 'preact/index.module.js' },
  // The typed API client's runtime (the console types its calls with the client's generated types).
  { specifier: 'openapi-fetch', pkg: 'openapi-fetch', file: 'dist/index.mjs' },
] as const;

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.map': 'application/json; charset=utf-8',
};

interface Asset {
  body: Buffer;
  type: string;
  etag: string;
  /** Vendor files carry their package version in the URL, so they never change under it. */
  immutable: boolean;
}

function asset(body: Buffer, file: string, immutable: boolean): Asset {
  const type = TYPES[path.extname(file)];
  if (!type) throw new Error(`console: no content type for ${file}`);
  return { body, type, etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 27)}"`, immutable };
}

/** The folder of an installed package (its package.json may not be exported, so walk up from its entry). */
function packageRoot(pkg: string): { dir: string; version: string } {
  let dir = path.dirname(createRequire(import.meta.url).resolve(pkg));
  for (;;) {
    const manifest = path.join(dir, 'package.json');
    if (existsSync(manifest)) {
      const json = JSON.parse(readFileSync(manifest, 'utf8')) as { name?: string; version: string };
      if (json.name === pkg) return { dir, version: json.version };
    }
    const up = path.dirname(dir);
    if (up === dir) throw new Error(`console: cannot find the ${pkg} package`);
    dir = up;
  }
}

function filesUnder(dir: string, prefix = ''): string[] {
  return readdirSync(dir).flatMap((name) => {
    const full = path.join(dir, name);
    return statSync(full).isDirectory() ? filesUnder(full, `${prefix}${name}/`) : [`${prefix}${name}`];
  });
}

interface ConsoleFiles {
  assets: Map<string, Asset>;
  html: Asset;
  csp: string;
}

function loadConsole(): ConsoleFiles {
  const assets = new Map<string, Asset>();
  const imports: Record<string, string> = {};
  for (const v of VENDOR) {
    const { dir, version } = packageRoot(v.pkg);
    const url = `${CONSOLE_PATH}/vendor/${v.pkg}@${version}/${v.file}`;
    const file = path.join(dir, v.file);
    assets.set(url, asset(readFileSync(file), file, true));
    if (existsSync(`${file}.map`)) assets.set(`${url}.map`, asset(readFileSync(`${file}.map`), `${file}.map`, true));
    imports[v.specifier] = url;
  }
  for (const name of filesUnder(WEB_DIR)) {
    // the page itself is built below; the tsconfig is not served
    if (name === 'index.html' || name.endsWith('.json')) continue;
    assets.set(`${CONSOLE_PATH}/${name}`, asset(readFileSync(path.join(WEB_DIR, name)), name, false));
  }
  const importMap = JSON.stringify({ imports });
  const template = readFileSync(path.join(WEB_DIR, 'index.html'), 'utf8');
  if (!template.includes('<!-- importmap -->'))
    throw new Error('console: index.html has no <!-- importmap --> placeholder');
  const html = template.replace('<!-- importmap -->', `<script type="importmap">${importMap}</script>`);
  // The one inline script is the import map, allowed by its hash; everything else must come from this origin.
  const hash = createHash('sha256').update(importMap).digest('base64');
  const csp = [
    "default-src 'none'",
    `script-src 'self' 'sha256-${hash}'`,
    "style-src 'self'",
    "img-src 'self' data:",
    "connect-src 'self'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
  ].join('; ');
  return { assets, html: asset(Buffer.from(html), 'index.html', false), csp };
}

function send(req: FastifyRequest, reply: FastifyReply, a: Asset): FastifyReply {
  reply
    .header('content-type', a.type)
    .header('x-content-type-options', 'nosniff')
    .header('cache-control', a.immutable ? 'public, max-age=31536000, immutable' : 'no-cache')
    .header('etag', a.etag);
  if (req.headers['if-none-match'] === a.etag) return reply.code(304).send();
  return reply.send(a.body);
}

/** GET / redirects to the console; GET /console[/…] serves it. Not part of the API, so not in the OpenAPI document. */
export function registerConsoleRoutes(app: FastifyInstance): void {
  const files = loadConsole();
  const page = (req: FastifyRequest, reply: FastifyReply) => {
    reply
      .header('content-security-policy', files.csp)
      .header('referrer-policy', 'no-referrer')
      .header('x-frame-options', 'DENY');
    return send(req, reply, files.html);
  };

  app.get('/', { schema: { hide: true } }, (_req, reply) => reply.redirect(CONSOLE_PATH, 302));
  app.get(CONSOLE_PATH, { schema: { hide: true } }, page);
  app.get(`${CONSOLE_PATH}/*`, { schema: { hide: true } }, (req, reply) => {
    const url = req.url.split('?')[0]!;
    const found = files.assets.get(url);
    if (found) return send(req, reply, found);
    // a console page (/console/messages/msg_…) has no dot in its last segment; a missing file does
    if (!path.posix.basename(url).includes('.')) return page(req, reply);
    return sendProblem(reply, problem(404, 'route_not_found', `No console file ${url}`));
  });
}
