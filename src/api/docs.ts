// The API's own documentation pages: the reference at /docs (Swagger UI over the
// OpenAPI document, in Handset's name, opening on Messages and trying requests
// against the server it is read from), /docs/errors, every error code of codes.ts
// with what it means and what to do, where each problem's `type` points, and
// /docs/inbox, how a receiver handles each event once (the console links to it).

import { readFileSync } from 'node:fs';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ERROR_CODES, ERRORS_PAGE } from './codes.js';

export const DOCS_PATH = '/docs';
export const INBOX_PAGE = `${DOCS_PATH}/inbox`;

/** The reference's sections in the order a newcomer needs them; every operation is tagged with one of these. */
export const API_TAGS = [
  { name: 'Messages', description: 'Send SMS and MMS, schedule and cancel them, follow each one’s status.' },
  { name: 'Calls', description: 'Place calls that ring a list of numbers in order until one answers.' },
  { name: 'Recordings', description: 'Recordings of answered calls, their audio and transcripts.' },
  { name: 'Webhook endpoints', description: 'Where Handset sends your events (Standard Webhooks), and their health.' },
  { name: 'Events', description: 'Every event of the account, and each attempt to deliver it.' },
  { name: 'Phone numbers', description: 'The numbers you send from and receive on, and how they ring.' },
  { name: 'Carriers', description: 'The carriers this deployment sends through, and whether each is taking requests.' },
  { name: 'Opt-outs', description: 'Recipients who texted STOP, and entries you make yourself.' },
  { name: 'Usage', description: 'What the account was billed for, from the ledger.' },
  { name: 'API keys', description: 'The account’s keys: create, roll and revoke them.' },
  { name: 'Tenants', description: 'Your own customers, to keep their numbers, messages and usage apart.' },
] as const;

/** Handset's icon, the web console's own (shipped beside the code, read from dist/ and src/ alike). */
const ICON = readFileSync(new URL('../../src/console/web/icon.svg', import.meta.url));

const origin = (req: FastifyRequest) => `${req.protocol}://${req.host}`;

export async function registerDocs(app: FastifyInstance): Promise<void> {
  await app.register(swaggerUi, {
    routePrefix: DOCS_PATH,
    uiConfig: {
      // No top bar (its logo and spec-URL box are Swagger's and Fastify's): the document's title leads.
      layout: 'BaseLayout',
      docExpansion: 'list',
      defaultModelsExpandDepth: 0,
      displayRequestDuration: true,
    },
    theme: {
      title: 'Handset API',
      favicon: [{ filename: 'icon.svg', rel: 'icon', sizes: 'any', type: 'image/svg+xml', content: ICON }],
    },
    // "Try it out" goes to the API being read, whatever its port or host.
    transformSpecification: (doc, req) => ({
      ...doc,
      servers: [{ url: origin(req), description: 'this Handset API' }],
    }),
  });
  for (const [path, html] of [
    [ERRORS_PAGE, ERRORS_HTML],
    [INBOX_PAGE, INBOX_HTML],
  ] as const) {
    app.get(path, { schema: { hide: true } }, (_req, reply) => reply.type('text/html; charset=utf-8').send(html));
  }
}

const escapeHtml = (text: string) =>
  text.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]!);
/** Our texts mark names with backticks, as the OpenAPI descriptions do. */
const inline = (text: string) => escapeHtml(text).replace(/`([^`]+)`/g, '<code>$1</code>');

const EXAMPLE = {
  type: `${ERRORS_PAGE}#invalid_phone_number`,
  title: 'Unprocessable Content',
  status: 422,
  code: 'invalid_phone_number',
  detail: 'to: +1312555 is not a possible phone number: it is too short for its country',
  param: 'to',
};

/** A documentation page in the errors page's plain style. */
const page = (title: string, body: string) => `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title}</title>
<link rel="icon" href="${DOCS_PATH}/static/theme/icon.svg" type="image/svg+xml">
<style>
  body { font: 15px/1.5 system-ui, sans-serif; color: #1b1f24; margin: 0; }
  main { max-width: 60rem; margin: 0 auto; padding: 1.5rem; }
  code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 0.9em; }
  pre { background: #f4f6f8; padding: 0.75rem 1rem; border-radius: 6px; overflow-x: auto; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; vertical-align: top; padding: 0.5rem 0.75rem; border-bottom: 1px solid #e3e6ea; }
  td:first-child { white-space: nowrap; }
  tr:target { background: #fff6d6; }
  a { color: #1f4fd1; }
</style>
</head>
<body>
<main>
${body}
</main>
</body>
</html>
`;

const ERRORS_HTML = page(
  'Handset API errors',
  `<h1>Handset API errors</h1>
<p>Every error the API answers is <code>application/problem+json</code>
(<a href="https://www.rfc-editor.org/rfc/rfc9457">RFC 9457</a>), such as:</p>
<pre>${escapeHtml(JSON.stringify(EXAMPLE, null, 2))}</pre>
<p>Match on <code>code</code>: it is stable. Show <code>detail</code> to a person; <code>param</code> names the field
it is about, and <code>type</code> links to the code's entry below. A 429 or 503 can be retried after
<code>Retry-After</code> seconds; any other 4xx changed nothing, and the same request will get the same answer.
The endpoints themselves are in the <a href="${DOCS_PATH}">API reference</a>.</p>
<table>
<thead><tr><th>code</th><th>status</th><th>what it means, and what to do</th></tr></thead>
<tbody>
${Object.entries(ERROR_CODES)
  .map(
    ([code, doc]) =>
      `<tr id="${code}"><td><a href="#${code}"><code>${code}</code></a></td>` +
      `<td>${doc.status.join(', ')}</td><td>${inline(doc.about)}</td></tr>`,
  )
  .join('\n')}
</tbody>
</table>`,
);

const INBOX_EXAMPLE = `import pg from 'pg';
import { createInbox } from '@handset/inbox';

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
const inbox = createInbox({ pool, secret: process.env.HANDSET_WEBHOOK_SECRET }); // whsec_…
await inbox.migrate(); // handset_inbox and its subjects table; safe at every start

// Mount before any body parser: the signature covers the exact bytes sent.
app.post('/webhooks/handset', inbox.nodeHandler(async (event, tx) => {
  if (event.type === 'message.delivered')
    await tx.query('UPDATE orders SET sms_confirmed = true WHERE sms_id = $1', [event.data.id]);
}));`;

const INBOX_HTML = page(
  'Receive each Handset event once',
  `<h1>Receive each Handset event once</h1>
<p>Handset delivers every event <strong>at least once</strong>, signed with
<a href="https://www.standardwebhooks.com/">Standard Webhooks</a>. It retries until your endpoint answers a 2xx
within 15 seconds, so an event comes again when your answer was lost after you had acted on it. Redeliver and
Recover send old events again under their original ids, and two events about one message can arrive in either
order. A cache of seen ids in Redis or memory does not make your handler run once: the cache and your data commit
separately, and a crash between the two acts twice or loses the event.</p>
<p><code>@handset/inbox</code> makes the check part of your own PostgreSQL transaction. It verifies the signature
before it reads anything, inserts the event id into <code>handset_inbox</code> with
<code>ON CONFLICT DO NOTHING</code>, then runs your handler on that same transaction and commits both together. A
copy of an event already handled answers <code>200 duplicate</code> without calling your handler; a handler that
throws rolls back your writes and the id, answers <code>500</code>, and runs again on the retry; an event older
(by <code>data.sequence</code>) than one already handled for the same resource is skipped as
<code>200 stale</code>.</p>
<h2>Install</h2>
<p>Make the package in the Handset checkout and install it, with <code>pg</code>, in your project:</p>
<pre>npm pack ./packages/inbox --pack-destination ~
cd ~/my-app &amp;&amp; npm install ~/handset-inbox-0.1.0.tgz pg</pre>
<h2>Use</h2>
<pre>${escapeHtml(INBOX_EXAMPLE)}</pre>
<p>Every write of the handler goes through <code>tx</code>. The same inbox serves Next.js route handlers, Hono, Bun
and Deno with <code>inbox.fetchHandler(handle)</code>. The package's README (<code>packages/inbox/README.md</code>)
covers Express, Fastify, options, retention with <code>prune()</code> and other drivers. A runnable receiver is in
<code>examples/inbox-receiver</code>: beside <code>handset dev</code>, <code>npm start</code> in that folder, then
<code>npx handset trigger duplicate-storm</code> in the checkout, and every event is applied once. With
<code>handset listen --forward-to</code>, your own inbox-backed app receives dev's events unchanged.</p>
<p>The events and their fields are in the <a href="${DOCS_PATH}">API reference</a>.</p>`,
);
