// Calls: the list with a form to place a sequential-ring call, and a call's page:
// its ring plan drawn as a timeline (one bar per leg on a shared time axis:
// dialing, ringing, answered, and where each ended with its hangup cause), the
// same legs as a table, what the ledger billed and the events it produced.

import { html } from 'htm/preact';
import { useState } from 'preact/hooks';
import { answer, client, idempotencyKey } from '../api.js';
import { RingTimeline } from '../charts.js';
import {
  Badge,
  ErrorBox,
  Facts,
  Head,
  Loading,
  TableWrap,
  Time,
  useLoad,
  usePageTitle,
  useSubmit,
} from '../components.js';
import { href, navigate } from '../router.js';
import {
  BillingSection,
  eventsAbout,
  EventsSection,
  FromSelect,
  ListView,
  StatusAndDirection,
  useList,
  useNumbers,
} from './shared.js';

const LEG_COLUMNS = [
  '#',
  'To',
  'Status',
  'Hangup cause',
  'Dialed',
  'Answered',
  'Ended',
  html`<abbr title="Facts learned by asking the carrier, because their webhook never came">Asked the carrier</abbr>`,
];

/** @param {{ search: string }} props */
export function CallList({ search }) {
  usePageTitle('Calls');
  const list = useList('/v1/calls', search, ['status', 'direction']);
  return html`<main id="main">
    <h1 tabindex="-1">Calls</h1>
    <${PlaceCall} />
    <${StatusAndDirection} base="/v1/calls" search=${search} />
    <${ListView} list=${list} search=${search} label="Calls"
      head=${['Call', 'Created', 'Direction', 'From', 'Rings', 'Status', 'Duration']}
      row=${(/** @type {any} */ c) => html`<tr data-id=${c.id}>
        <td><a href=${href(`/calls/${encodeURIComponent(c.id)}`)}><code>${c.id}</code></a></td>
        <td><${Time} at=${c.created_at} /></td>
        <td>${c.direction}</td>
        <td>${c.from}</td>
        <td>${c.to.join(', ')}</td>
        <td><${Badge} value=${c.status} /></td>
        <td>${c.duration_seconds === null ? '' : `${c.duration_seconds} s`}</td>
      </tr>`} />
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
      <button type="submit" disabled=${submit.busy || !caller}>${submit.busy ? 'Placing…' : 'Place call'}</button>
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
          <${TableWrap} label="Legs">
            <table class="list legs">
              <caption>Legs</caption>
              <${Head} cells=${LEG_COLUMNS} />
              <tbody>
                ${d.call.legs.map(
                  (/** @type {any} */ l) => html`<tr data-leg=${l.position}>
                    <td>${l.position + 1}</td>
                    <td>${l.to}</td>
                    <td><${Badge} value=${l.status} /></td>
                    <td>${l.hangup_cause ?? ''}</td>
                    <td><${Time} at=${l.dialed_at} precise /></td>
                    <td><${Time} at=${l.answered_at} precise /></td>
                    <td><${Time} at=${l.ended_at} precise /></td>
                    <td>${(l.reconciled ?? []).join(', ')}</td>
                  </tr>`,
                )}
              </tbody>
            </table>
          <//>
        </section>
        <${BillingSection} records=${d.usage} />
        <${EventsSection} events=${d.events} subjectId=${id} />`
        : null
    }
  </main>`;
}
