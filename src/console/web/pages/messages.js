// Messages: the list (filters by status and direction, cursor paging) with a form
// to send one (from a number, with a fallback on another carrier) or one to each
// recipient of an uploaded CSV (in batches, each refusal shown by its row), and the
// carriers' health, and a message's page: its details (the carrier that sent it,
// and why it failed over if it did) and its timeline — every word about it (the
// API, the dispatcher, each carrier receipt marked applied, refused or
// informational, each naming its carrier), what the ledger billed and the events
// it produced with their deliveries, in the order they happened.

import { html } from 'htm/preact';
import { useState } from 'preact/hooks';
import { answer, client, idempotencyKey } from '../api.js';
import { Badge, ErrorBox, Facts, Loading, Time, useLoad, usePageTitle, useSubmit } from '../components.js';
import { recipientsOf } from '../recipients.js';
import { href, navigate } from '../router.js';
import {
  anyDeliveryPending,
  BillingLine,
  CarrierHealth,
  eventsAbout,
  EventSummary,
  FromSelect,
  IdLink,
  ListView,
  StatusAndDirection,
  useList,
  useNumbers,
} from './shared.js';

/** Statuses a message can still leave, and how often to look again while it is in one. */
const CHANGING = /** @type {Record<string, number>} */ ({ scheduled: 10_000, queued: 1000, sent: 1000 });
/** After the final status, the carrier's late duplicates and contradictions still come in for a while. */
const SETTLING_MS = 60_000;

/** How soon to look again at a message's page, or null when nothing there is still changing. @param {any} d */
function nextLook(d) {
  const completed = d.message.completed_at ? Date.parse(d.message.completed_at) : null;
  if (CHANGING[d.message.status]) return CHANGING[d.message.status] ?? null;
  if ((completed !== null && Date.now() - completed < SETTLING_MS) || anyDeliveryPending(d.events)) return 3000;
  return null;
}

/** What a message says: its body, or how many media it carries. @param {any} m */
const contentOf = (m) => m.body ?? (m.media_urls.length ? `${m.media_urls.length} media` : '');

/** @type {import('../components.js').Column[]} */
const COLUMNS = [
  {
    label: 'Message',
    kind: 'title',
    cell: (m) => html`<${IdLink} to=${`/messages/${encodeURIComponent(m.id)}`} id=${m.id} />`,
  },
  { label: 'Status', kind: 'status', cell: (m) => html`<${Badge} value=${m.status} />` },
  { label: 'Created', cell: (m) => html`<${Time} at=${m.created_at} />` },
  { label: 'Direction', cell: (m) => m.direction },
  { label: 'From', cell: (m) => m.from },
  { label: 'To', cell: (m) => m.to },
  {
    label: 'Carrier',
    cell: (m) =>
      html`<span data-carrier=${m.carrier}
        >${m.carrier}${m.failover ? html` <span class="muted" title=${m.failover.reason}>(failed over)</span>` : null}</span
      >`,
  },
  { label: 'Body', kind: 'text', cell: contentOf, full: contentOf },
];

/** @param {{ search: string }} props */
export function MessageList({ search }) {
  usePageTitle('Messages');
  const list = useList('/v1/messages', search, ['status', 'direction']);
  return html`<main id="main">
    <h1 tabindex="-1">Messages</h1>
    <${CarrierHealth} />
    <${ComposeMessage} onSent=${list.reload} />
    <${StatusAndDirection} base="/v1/messages" search=${search} />
    <${ListView} list=${list} search=${search} label="Messages" columns=${COLUMNS} />
  </main>`;
}

/** The most messages one batch request takes (POST /v1/messages/batch); a longer list is sent as several. */
const MAX_BATCH = 1000;

/** @param {{ onSent: () => void }} props */
function ComposeMessage({ onSent }) {
  const numbers = useNumbers();
  const [from, setFrom] = useState('');
  const [to, setTo] = useState('');
  const [body, setBody] = useState('');
  const [fallback, setFallback] = useState('');
  const [key, setKey] = useState(idempotencyKey);
  /** @type {[{ name: string, recipients: { row: number, to: string }[] } | null, (l: any) => void]} */
  const [list, setList] = useState(/** @type {any} */ (null));
  /** @type {[{ created: number, refused: { row: number, to: string, detail: string }[] } | null, (r: any) => void]} */
  const [result, setResult] = useState(/** @type {any} */ (null));
  const submit = useSubmit();
  const sender = from || numbers[0]?.number || '';
  const senderCarrier = numbers.find((n) => n.number === sender)?.carrier;
  // A fallback is a number at another carrier: the message goes out from it only if the first certainly did not take it.
  const fallbacks = numbers.filter((n) => n.carrier !== senderCarrier);
  const message = () => ({
    from: sender,
    body,
    ...(fallback && fallbacks.some((n) => n.number === fallback) ? { fallback_from: fallback } : {}),
  });
  /** @param {Event} e */
  const send = (e) => {
    e.preventDefault();
    setResult(null);
    submit.run(async () => {
      if (list) {
        setResult(await sendToList(list.recipients, message(), key));
        setKey(idempotencyKey());
        onSent();
        return;
      }
      const m = await answer(
        client.POST('/v1/messages', {
          params: { header: { 'idempotency-key': key } },
          body: { ...message(), to: to.trim() },
        }),
      );
      navigate(href(`/messages/${encodeURIComponent(m.id)}`));
    });
  };
  /** @param {any} e */
  const chooseFile = async (e) => {
    const file = /** @type {File | undefined} */ (e.currentTarget.files?.[0]);
    setResult(null);
    setList(file ? { name: file.name, recipients: recipientsOf(await file.text()) } : null);
  };
  return html`<details class="compose">
    <summary>Send a message</summary>
    <form onSubmit=${send}>
      <div class="field"><label for="msg-from">From</label>
        <${FromSelect} id="msg-from" value=${sender} onChange=${setFrom} numbers=${numbers} /></div>
      ${
        fallbacks.length > 0
          ? html`<div class="field"><label for="msg-fallback">Fallback</label>
            <${FromSelect} id="msg-fallback" value=${fallback} onChange=${setFallback} numbers=${fallbacks}
              required=${false} placeholder="None" /></div>`
          : null
      }
      ${
        list
          ? null
          : html`<div class="field"><label for="msg-to">To</label>
            <input id="msg-to" type="tel" required placeholder="+15555550100" value=${to}
              onInput=${(/** @type {any} */ e) => setTo(e.currentTarget.value)} /></div>`
      }
      <div class="field"><label for="msg-csv">Recipients (CSV)</label>
        <input id="msg-csv" type="file" accept=".csv,text/csv,text/plain" onChange=${chooseFile} /></div>
      <div class="field wide"><label for="msg-body">Body</label>
        <textarea id="msg-body" rows="2" required maxlength="1600" value=${body}
          onInput=${(/** @type {any} */ e) => setBody(e.currentTarget.value)}></textarea></div>
      <button type="submit" class="primary" disabled=${submit.busy || !sender || list?.recipients.length === 0}>${
        submit.busy ? 'Sending…' : list ? `Send to ${list.recipients.length.toLocaleString()}` : 'Send'
      }</button>
      ${
        list
          ? html`<p class="full muted" role="status">
            ${list.recipients.length.toLocaleString()} recipients in ${list.name}
            ${list.recipients.length === 0 ? ' (no column headed to or phone, and nothing in the first)' : ''}</p>`
          : null
      }
    </form>
    <${ErrorBox} error=${submit.error} />
    ${result ? html`<${ListResult} result=${result} />` : null}
  </details>`;
}

/**
 * Sends one message to each recipient in batches of MAX_BATCH, each batch under a key
 * of its own made from the form's, so a retried send creates nothing twice.
 * @param {{ row: number, to: string }[]} recipients @param {any} message @param {string} key
 */
async function sendToList(recipients, message, key) {
  let created = 0;
  /** @type {{ row: number, to: string, detail: string }[]} */
  const refused = [];
  for (let start = 0; start < recipients.length; start += MAX_BATCH) {
    const part = recipients.slice(start, start + MAX_BATCH);
    const batch = await answer(
      client.POST('/v1/messages/batch', {
        params: { header: { 'idempotency-key': `${key}:${start / MAX_BATCH}` } },
        body: { messages: part.map((r) => ({ ...message, to: r.to })) },
      }),
    );
    for (const item of batch.data) {
      if (item.message) created++;
      else {
        const r = part[item.index];
        refused.push({ row: r?.row ?? 0, to: r?.to ?? '', detail: item.error?.detail ?? item.error?.code ?? '' });
      }
    }
  }
  return { created, refused };
}

/** What a send to a list did: how many were created, and each refused row with why. @param {{ result: any }} props */
function ListResult({ result }) {
  return html`<div class="list-result" role="status">
    <p><strong>${result.created.toLocaleString()}</strong> ${result.created === 1 ? 'message' : 'messages'} created${
      result.refused.length ? html`, <strong>${result.refused.length.toLocaleString()}</strong> refused:` : '.'
    }</p>
    ${
      result.refused.length
        ? html`<ul class="refused">
          ${result.refused.map(
            (/** @type {any} */ r) => html`<li data-row=${r.row}>Row ${r.row} (${r.to}): ${r.detail}</li>`,
          )}
        </ul>`
        : null
    }
  </div>`;
}

/** @param {any} h a status history entry */
function historyTitle(h) {
  if (h.source === 'api') return h.status === 'canceled' ? 'Canceled' : `Created (${h.status})`;
  if (h.source === 'dispatch') {
    if (h.status === 'sent') return `Accepted by ${h.carrier ?? 'the carrier'} (sent)`;
    if (h.status === 'queued') return `Failed over from ${h.carrier ?? 'its carrier'}`;
    return 'Refused by the carrier at send';
  }
  return `Carrier receipt: ${h.carrier_status ?? h.status}${h.carrier ? ` (${h.carrier})` : ''}`;
}

const EFFECT_LABEL = /** @type {Record<string, string>} */ ({
  applied: 'Applied',
  refused: 'Refused',
  informational: 'Informational',
});

/**
 * The message's history, billing and events in one list by time; history keeps
 * the API's order, and what a transition wrote (billing, an event) follows it.
 * @param {any} d
 */
function timelineOf(d) {
  const entries = [
    ...d.history.map((/** @type {any} */ h, /** @type {number} */ i) => ({
      kind: 'history',
      at: h.occurred_at,
      order: 0,
      i,
      h,
    })),
    ...d.usage.map((/** @type {any} */ r, /** @type {number} */ i) => ({
      kind: 'billing',
      at: r.occurred_at,
      order: 1,
      i,
      r,
    })),
    ...d.events.map((/** @type {any} */ ev, /** @type {number} */ i) => ({
      kind: 'event',
      at: ev.timestamp,
      order: 2,
      i,
      ev,
    })),
  ];
  return entries.sort((a, b) => Date.parse(a.at) - Date.parse(b.at) || a.order - b.order || a.i - b.i);
}

/** @param {{ entry: any }} props */
function TimelineEntry({ entry }) {
  if (entry.kind === 'history') {
    const h = entry.h;
    return html`<li class="tl tl-history effect-${h.effect}" data-effect=${h.effect} data-source=${h.source}>
      <${Time} at=${h.occurred_at} precise />
      <div class="tl-body">
        <strong>${historyTitle(h)}</strong> <${Badge} value=${h.effect} label=${EFFECT_LABEL[h.effect] ?? h.effect} />
        ${h.source === 'carrier' && h.effect === 'applied' ? html` <span class="muted">→ ${h.status}</span>` : null}
        ${h.effect === 'informational' ? html` <span class="muted">(the message stays ${h.status})</span>` : null}
        ${h.error_code ? html`<div>Error code <code>${h.error_code}</code></div>` : null}
        ${h.note ? html`<div class="note">${h.note}</div>` : null}
      </div>
    </li>`;
  }
  if (entry.kind === 'billing') {
    return html`<li class="tl tl-billing" data-kind="billing">
      <${Time} at=${entry.r.occurred_at} precise />
      <div class="tl-body"><strong><${BillingLine} record=${entry.r} /></strong></div>
    </li>`;
  }
  return html`<li class="tl tl-event" data-kind="event">
    <${Time} at=${entry.ev.timestamp} precise />
    <div class="tl-body"><strong>Event</strong> <${EventSummary} event=${entry.ev} /></div>
  </li>`;
}

/** @param {{ params: { id: string } }} props */
export function MessagePage({ params }) {
  const id = params.id;
  usePageTitle(`Message ${id}`);
  const path = `/v1/messages/${encodeURIComponent(id)}`;
  const page = useLoad(
    path,
    async (signal) => {
      const [message, history, usage, events] = await Promise.all([
        answer(client.GET('/v1/messages/{id}', { params: { path: { id } }, signal })),
        answer(client.GET('/v1/messages/{id}/status_history', { params: { path: { id } }, signal })),
        answer(client.GET('/v1/messages/{id}/usage_records', { params: { path: { id } }, signal })),
        eventsAbout(id, signal),
      ]);
      return { message, history: history.data, usage: usage.data, events };
    },
    { poll: nextLook },
  );
  const d = page.data;
  return html`<main id="main">
    <p class="crumbs"><a href=${href('/messages')}>Messages</a></p>
    <h1 tabindex="-1">Message <code>${id}</code></h1>
    <${ErrorBox} error=${page.error} />
    ${page.loading ? html`<${Loading} />` : null}
    ${
      d
        ? html`<p class="status-line">Status <${Badge} value=${d.message.status} /></p>
        <${Facts}
          items=${[
            ['Direction', d.message.direction],
            ['From', d.message.from],
            ['To', d.message.to],
            ['Body', d.message.body],
            ['Segments', `${d.message.segments} (${d.message.encoding})`],
            ['Error code', d.message.error_code],
            ['Carrier', d.message.carrier],
            ['Fallback', d.message.fallback_from],
            [
              'Failed over',
              d.message.failover
                ? `from ${d.message.failover.from} (${d.message.failover.carrier}): ${d.message.failover.reason}`
                : null,
            ],
            ['Carrier id', d.message.carrier_message_id ? html`<code>${d.message.carrier_message_id}</code>` : null],
            ['Created', html`<${Time} at=${d.message.created_at} />`],
            ['Sent', html`<${Time} at=${d.message.sent_at} />`],
            ['Completed', html`<${Time} at=${d.message.completed_at} />`],
          ]}
        />
        <section aria-labelledby="timeline-h">
          <h2 id="timeline-h">Timeline</h2>
          <ol class="timeline">${timelineOf(d).map((entry) => html`<${TimelineEntry} entry=${entry} />`)}</ol>
          <p><a href=${href(`/events?subject_id=${encodeURIComponent(id)}`)}>All events about this message</a></p>
        </section>`
        : null
    }
  </main>`;
}
