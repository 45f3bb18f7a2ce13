// Calls: the list with a form to place a sequential-ring call, and a call's page:
// its ring plan drawn as a timeline (one bar per leg on a shared time axis:
// dialing, ringing, answered, and where each ended with its hangup cause), the
// same legs as a table, what the ledger billed and the events it produced.

import { html } from 'htm/preact';
import { useState } from 'preact/hooks';
import { answer, client, idempotencyKey } from '../api.js';
import { RingTimeline } from '../charts.js';
import { Badge, DataTable, ErrorBox, Facts, Loading, Time, useLoad, usePageTitle, useSubmit } from '../components.js';
import { href, navigate } from '../router.js';
import {
  BillingSection,
  eventsAbout,
  EventsSection,
  FromSelect,
  IdLink,
  ListView,
  StatusAndDirection,
  useList,
  useNumbers,
} from './shared.js';

/** @type {import('../components.js').Column[]} */
const COLUMNS = [
  {
    label: 'Call',
    kind: 'title',
    cell: (c) => html`<${IdLink} to=${`/calls/${encodeURIComponent(c.id)}`} id=${c.id} />`,
  },
  { label: 'Status', kind: 'status', cell: (c) => html`<${Badge} value=${c.status} />` },
  { label: 'Created', cell: (c) => html`<${Time} at=${c.created_at} />` },
  { label: 'Direction', cell: (c) => c.direction },
  { label: 'From', cell: (c) => c.from },
  // one number per line: a ring plan can be long, and its order is the point
  {
    label: 'Rings',
    kind: 'text',
    cell: (c) => html`<div>${c.to.map((/** @type {string} */ n) => html`<div>${n}</div>`)}</div>`,
  },
  { label: 'Duration', cell: (c) => (c.duration_seconds === null ? '' : `${c.duration_seconds} s`) },
];

/** @type {import('../components.js').Column[]} */
const LEG_COLUMNS = [
  { label: '#', cell: (l) => l.position + 1 },
  { label: 'To', kind: 'title', cell: (l) => l.to },
  { label: 'Status', kind: 'status', cell: (l) => html`<${Badge} value=${l.status} />` },
  { label: 'Hangup cause', cell: (l) => l.hangup_cause ?? '' },
  { label: 'Dialed', cell: (l) => html`<${Time} at=${l.dialed_at} precise />` },
  { label: 'Answered', cell: (l) => html`<${Time} at=${l.answered_at} precise />` },
  { label: 'Ended', cell: (l) => html`<${Time} at=${l.ended_at} precise />` },
  {
    label: 'Asked the carrier',
    head: html`<abbr title="Facts learned by asking the carrier, because their webhook never came">Asked the carrier</abbr>`,
    cell: (l) => (l.reconciled ?? []).join(', '),
  },
];

/** @param {{ search: string }} props */
export function CallList({ search }) {
  usePageTitle('Calls');
  const list = useList('/v1/calls', search, ['status', 'direction']);
  return html`<main id="main">
    <h1 tabindex="-1">Calls</h1>
    <${PlaceCall} />
    <${StatusAndDirection} base="/v1/calls" search=${search} />
    <${ListView} list=${list} search=${search} label="Calls" columns=${COLUMNS} />
  </main>`;
}

function PlaceCall() {
  const numbers = useNumbers();
  const [from, setFrom] = useState('');
  const [to, setTo] = useState('');
  const [timeout, setTimeoutSecs] = useState('20');
  const [key] = useState(idempotencyKey);
  const submit = useSubmit();
  const caller = from || numbers[0]?.number || '';
  /** @param {Event} e */
  const place = (e) => {
    e.preventDefault();
    const targets = to.split(/[\s,]+/).filter(Boolean);
    submit.run(async () => {
      const body = { from: caller, to: targets, ring_timeout_secs: Number(timeout) };
      const call = await answer(client.POST('/v1/calls', { params: { header: { 'idempotency-key': key } }, body }));
      navigate(href(`/calls/${encodeURIComponent(call.id)}`));
    });
  };
  return html`<details class="compose">
    <summary>Place a call</summary>
    <form onSubmit=${place}>
      <div class="field"><label for="call-from">From</label>
        <${FromSelect} id="call-from" value=${caller} onChange=${setFrom} numbers=${numbers} /></div>
      <div class="field wide"><label for="call-to">Ring, in order</label>
        <input id="call-to" required aria-describedby="call-to-help"
          placeholder="+15555550110, +15555550111, +15555550113"
          value=${to} onInput=${(/** @type {any} */ e) => setTo(e.currentTarget.value)} />
        <small id="call-to-help" class="muted">
          Numbers separated by commas; each rings until it answers or the timeout passes.
        </small></div>
      <div class="field"><label for="call-timeout">Ring timeout (s)</label>
        <input id="call-timeout" type="number" min="5" max="120" required value=${timeout}
          onInput=${(/** @type {any} */ e) => setTimeoutSecs(e.currentTarget.value)} /></div>
      <button type="submit" class="primary" disabled=${submit.busy || !caller}>${submit.busy ? 'Placing…' : 'Place call'}</button>
    </form>
    <${ErrorBox} error=${submit.error} />
  </details>`;
}

/** @param {{ params: { id: string } }} props */
export function CallPage({ params }) {
  const id = params.id;
  usePageTitle(`Call ${id}`);
  const path = `/v1/calls/${encodeURIComponent(id)}`;
  const page = useLoad(
    path,
    async (signal) => {
      const [call, usage, events] = await Promise.all([
        answer(client.GET('/v1/calls/{id}', { params: { path: { id } }, signal })),
        answer(client.GET('/v1/calls/{id}/usage_records', { params: { path: { id } }, signal })),
        eventsAbout(id, signal),
      ]);
      return { call, usage: usage.data, events, at: Date.now() };
    },
    { poll: (d) => (d.call.ended_at ? null : 1000) },
  );
  const d = page.data;
  return html`<main id="main">
    <p class="crumbs"><a href=${href('/calls')}>Calls</a></p>
    <h1 tabindex="-1">Call <code>${id}</code></h1>
    <${ErrorBox} error=${page.error} />
    ${page.loading ? html`<${Loading} />` : null}
    ${
      d
        ? html`<p class="status-line">Status <${Badge} value=${d.call.status} /></p>
        <${Facts}
          items=${[
            ['Direction', d.call.direction],
            ['From', d.call.from],
            ['Number', d.call.number],
            ['Ring timeout', `${d.call.ring_timeout_secs} s per target`],
            ['Created', html`<${Time} at=${d.call.created_at} />`],
            ['Answered', html`<${Time} at=${d.call.answered_at} />`],
            ['Ended', html`<${Time} at=${d.call.ended_at} />`],
            ['Duration', d.call.duration_seconds === null ? null : `${d.call.duration_seconds} s`],
          ]}
        />
        <section aria-labelledby="ring-h">
          <h2 id="ring-h">Ring plan</h2>
          <${RingTimeline} call=${d.call} now=${d.at} titleId="ring-title" />
          <ul class="legend" aria-label="Legend">
            <li><span class="swatch seg-dialing"></span>dialing</li>
            <li><span class="swatch seg-ringing"></span>ringing</li>
            <li><span class="swatch seg-answered"></span>answered</li>
            <li><span class="swatch leg-end-swatch"></span>ended</li>
          </ul>
          <${DataTable} label="Legs" caption="Legs" className="legs" columns=${LEG_COLUMNS} items=${d.call.legs}
            rowProps=${(/** @type {any} */ l) => ({ 'data-leg': l.position })} />
        </section>
        <${BillingSection} records=${d.usage} />
        <${EventsSection} events=${d.events} subjectId=${id} />`
        : null
    }
  </main>`;
}
