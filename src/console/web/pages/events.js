// Events: the account's outbound events (filter by type and by the resource they
// are about) and an event's page: its body, every delivery attempt to every
// endpoint (status, latency, excerpt of the answer), and Redeliver.

import { html } from 'htm/preact';
import { useState } from 'preact/hooks';
import { answer, client } from '../api.js';
import { Badge, DataTable, ErrorBox, Facts, Loading, Time, useLoad, usePageTitle, useSubmit } from '../components.js';
import { href } from '../router.js';
import {
  ATTEMPT_OUTCOME_COLUMNS,
  ATTEMPT_STARTED_COLUMN,
  FilterSelect,
  IdLink,
  ListView,
  setFilter,
  useEnum,
  useList,
} from './shared.js';

/** The console page of the resource an event is about. @param {string} id */
function subjectHref(id) {
  if (id.startsWith('msg_')) return href(`/messages/${encodeURIComponent(id)}`);
  if (id.startsWith('call_')) return href(`/calls/${encodeURIComponent(id)}`);
  if (id.startsWith('ep_')) return href(`/webhooks/${encodeURIComponent(id)}`);
  return null;
}

/** @param {{ id: string }} props */
function Subject({ id }) {
  const to = subjectHref(id);
  return to ? html`<a href=${to}><code>${id}</code></a>` : html`<code>${id}</code>`;
}

/** @param {{ search: string }} props */
function SubjectFilter({ search }) {
  const current = new URLSearchParams(search).get('subject_id') ?? '';
  const [value, setValue] = useState(current);
  /** @param {Event} e */
  const submit = (e) => {
    e.preventDefault();
    setFilter(search, 'subject_id', value.trim());
  };
  return html`<form class="field inline-form" onSubmit=${submit}>
    <label for="filter-subject">About (resource id)</label>
    <span class="inline">
      <input id="filter-subject" value=${value} placeholder="msg_… or call_…" spellcheck="false"
        onInput=${(/** @type {any} */ e) => setValue(e.currentTarget.value)} />
      <button type="submit">Apply</button>
    </span>
  </form>`;
}

/** @type {import('../components.js').Column[]} */
const COLUMNS = [
  {
    label: 'Event',
    kind: 'title',
    cell: (ev) => html`<${IdLink} to=${`/events/${encodeURIComponent(ev.id)}`} id=${ev.id} />`,
  },
  { label: 'Time', cell: (ev) => html`<${Time} at=${ev.timestamp} />` },
  { label: 'Type', cell: (ev) => html`<code>${ev.type}</code>` },
  { label: 'About', cell: (ev) => (ev.data?.id ? html`<${Subject} id=${String(ev.data.id)} />` : '') },
];

/** @param {{ search: string }} props */
export function EventList({ search }) {
  usePageTitle('Events');
  const list = useList('/v1/events', search, ['type', 'subject_id']);
  const types = useEnum('/v1/events', 'type');
  return html`<main id="main">
    <h1 tabindex="-1">Events</h1>
    <div class="filters" role="group" aria-label="Filters">
      <${FilterSelect} id="filter-type" label="Type" name="type" search=${search} options=${types} all="Every type" />
      <${SubjectFilter} search=${search} key=${search} />
    </div>
    <${ListView} list=${list} search=${search} label="Events" columns=${COLUMNS} />
  </main>`;
}

/** @type {import('../components.js').Column[]} */
const ATTEMPT_COLUMNS = [
  { label: '#', cell: (a) => a.attempt },
  { label: 'Trigger', cell: (a) => a.trigger },
  ATTEMPT_STARTED_COLUMN,
  ...ATTEMPT_OUTCOME_COLUMNS,
];

/** @param {{ delivery: any }} props */
function DeliveryCard({ delivery }) {
  return html`<article class="delivery" data-delivery=${delivery.id} aria-labelledby=${`dl-${delivery.id}`}>
    <h3 id=${`dl-${delivery.id}`}>
      <a href=${href(`/webhooks/${encodeURIComponent(delivery.endpoint_id)}`)}>${delivery.url}</a>
      ${' '}<${Badge} value=${delivery.status} />
    </h3>
    ${
      delivery.next_attempt_at
        ? html`<p class="muted">Next attempt <${Time} at=${delivery.next_attempt_at} /></p>`
        : null
    }
    ${
      delivery.attempts.length === 0
        ? html`<p class="muted">No attempt yet.</p>`
        : html`<${DataTable} label=${`Attempts to ${delivery.url}`} className="attempts" columns=${ATTEMPT_COLUMNS}
            items=${delivery.attempts}
            rowProps=${(/** @type {any} */ a) => ({ 'data-attempt': a.attempt, 'data-trigger': a.trigger })} />`
    }
  </article>`;
}

/** @param {{ params: { id: string } }} props */
export function EventPage({ params }) {
  const id = params.id;
  usePageTitle(`Event ${id}`);
  const path = `/v1/events/${encodeURIComponent(id)}`;
  // after Redeliver, look again every second for a while, until the new attempts are in
  const [watchUntil, setWatchUntil] = useState(0);
  const page = useLoad(
    path,
    async (signal) => {
      const [event, deliveries] = await Promise.all([
        answer(client.GET('/v1/events/{id}', { params: { path: { id } }, signal })),
        answer(client.GET('/v1/events/{id}/deliveries', { params: { path: { id } }, signal })),
      ]);
      return { event, deliveries: deliveries.data };
    },
    {
      poll: (d) =>
        d.deliveries.some((/** @type {any} */ x) => x.status === 'pending') || Date.now() < watchUntil ? 1000 : null,
    },
  );
  const redeliver = useSubmit();
  const [queued, setQueued] = useState(/** @type {number | null} */ (null));
  const redeliverNow = () =>
    redeliver.run(async () => {
      setQueued(null);
      const res = await answer(client.POST('/v1/events/{id}/redeliver', { params: { path: { id } } }));
      setQueued(res.deliveries.length);
      setWatchUntil(Date.now() + 30_000);
      page.reload();
    });
  const d = page.data;
  return html`<main id="main">
    <p class="crumbs"><a href=${href('/events')}>Events</a></p>
    <h1 tabindex="-1">Event <code>${id}</code></h1>
    <${ErrorBox} error=${page.error} />
    ${page.loading ? html`<${Loading} />` : null}
    ${
      d
        ? html`<${Facts}
          items=${[
            ['Type', html`<code>${d.event.type}</code>`],
            ['About', d.event.data?.id ? html`<${Subject} id=${String(d.event.data.id)} />` : null],
            ['Time', html`<${Time} at=${d.event.timestamp} precise />`],
          ]}
        />
        <section aria-labelledby="deliveries-h">
          <h2 id="deliveries-h">Deliveries</h2>
          <div class="actions">
            <button type="button" onClick=${redeliverNow} disabled=${redeliver.busy}>
              ${redeliver.busy ? 'Redelivering…' : 'Redeliver'}
            </button>
            <span class="muted">Sends the same event (same id, fresh signature) to its endpoints again.</span>
          </div>
          ${
            queued !== null
              ? html`<p class="notice" role="status">
                  Redelivery queued to ${queued} endpoint${queued === 1 ? '' : 's'}.
                </p>`
              : null
          }
          <${ErrorBox} error=${redeliver.error} />
          ${
            d.deliveries.length === 0
              ? html`<p class="muted">No webhook endpoint was subscribed to this event.</p>`
              : null
          }
          ${d.deliveries.map((/** @type {any} */ x) => html`<${DeliveryCard} delivery=${x} />`)}
        </section>
        <section aria-labelledby="body-h">
          <h2 id="body-h">Body</h2>
          <pre class="json" tabindex="0" aria-label="Event body">${JSON.stringify(d.event, null, 2)}</pre>
        </section>`
        : null
    }
  </main>`;
}
