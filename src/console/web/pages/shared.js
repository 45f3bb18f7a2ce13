// Parts shared by the pages of several resources: list filters kept in the
// address, a resource's billing and the events it produced, the account's phone
// numbers (each at its carrier) for the compose forms, and the carriers' health.

import { html } from 'htm/preact';
import { answer, client, enumOf } from '../api.js';
import { Badge, DataTable, ErrorBox, Loading, Pager, Time, useLoad } from '../components.js';
import { href, navigate } from '../router.js';
import { formatDuration } from '../time.js';

export const PAGE_SIZE = 20;

/** The values the API accepts for a list filter. @param {string} path @param {string} name */
export function useEnum(path, name) {
  return useLoad(`enum ${path} ${name}`, () => enumOf(path, name)).data ?? [];
}

/**
 * Changes one filter of the list at this address; paging starts again from the newest.
 * @param {string} search @param {string} name @param {string} value
 */
export function setFilter(search, name, value) {
  const q = new URLSearchParams(search);
  if (value) q.set(name, value);
  else q.delete(name);
  q.delete('starting_after');
  const rest = q.toString();
  navigate(location.pathname + (rest ? `?${rest}` : ''), { replace: true });
}

/**
 * A filter <select> bound to the address.
 * @param {{ id: string, label: string, name: string, search: string, options: string[], all: string }} props
 */
export function FilterSelect({ id, label, name, search, options, all }) {
  const value = new URLSearchParams(search).get(name) ?? '';
  return html`<div class="field">
    <label for=${id}>${label}</label>
    <select id=${id} value=${value}
      onChange=${(/** @type {any} */ e) => setFilter(search, name, e.currentTarget.value)}>
      <option value="">${all}</option>
      ${options.map((o) => html`<option value=${o}>${o.replaceAll('_', ' ')}</option>`)}
    </select>
  </div>`;
}

/**
 * The status and direction filters of a list that has both (messages, calls), with the values the API accepts.
 * @param {{ base: string, search: string }} props base: the list's API path
 */
export function StatusAndDirection({ base, search }) {
  const statuses = useEnum(base, 'status');
  const directions = useEnum(base, 'direction');
  return html`<div class="filters" role="group" aria-label="Filters">
    <${FilterSelect} id="filter-status" label="Status" name="status" search=${search} options=${statuses}
      all="Any status" />
    <${FilterSelect} id="filter-direction" label="Direction" name="direction" search=${search} options=${directions}
      all="Both directions" />
  </div>`;
}

/** @typedef {import('../api.js').Paths} Paths */
/**
 * The lists the console pages through: each takes `limit` and `starting_after`, and some filters.
 * @typedef {'/v1/messages' | '/v1/calls' | '/v1/events' | '/v1/opt_outs' | '/v1/webhook_endpoints'
 *   | '/v1/webhook_endpoints/{id}/attempts'} ListRoute
 */

/**
 * The list query for this address: the page size, its filters and its cursor.
 * @param {string} search @param {string[]} filters
 */
export function listQuery(search, filters) {
  const q = new URLSearchParams(search);
  /** @type {Record<string, string | number>} */
  const params = { limit: PAGE_SIZE };
  for (const f of ['starting_after', ...filters]) {
    const v = q.get(f);
    if (v) params[f] = v;
  }
  return params;
}

/**
 * A cursor-paged list at this address: the page its filters and cursor select.
 * @param {ListRoute} route e.g. '/v1/messages' @param {string} search @param {string[]} filters
 * @param {Record<string, string>} [path] the route's path parameters
 */
export function useList(route, search, filters, path = {}) {
  const params = { path, query: listQuery(search, filters) };
  // One route's filters are not another's: the generated types check each page's call, not this shared one.
  const list = /** @type {(route: string, init: object) => Promise<any>} */ (client.GET);
  return useLoad(`${route} ${JSON.stringify(params)}`, (signal) => answer(list(route, { params, signal })));
}

/**
 * A list's page as a table (cards on a phone), with its error, its empty state and its pager.
 * @param {{ list: { data: any, error: Error | null, loading: boolean }, search: string, label: string,
 *   columns: import('../components.js').Column[], rowProps?: (item: any) => Record<string, any>,
 *   className?: string, empty?: string }} props
 *   rowProps: each row's attributes (default: its data-id);
 *   empty: said when there is nothing at all (default: "No <label> yet.")
 */
export function ListView({ list, search, label, columns, rowProps, className, empty }) {
  const rows = list.data?.data ?? [];
  const filtered = [...new URLSearchParams(search).keys()].some((k) => k !== 'starting_after');
  const noun = label.toLowerCase();
  return html`<${ErrorBox} error=${list.error} />
    ${list.loading ? html`<${Loading} />` : null}
    ${
      list.data && rows.length === 0
        ? html`<p class="muted">${filtered ? `No ${noun} match these filters.` : (empty ?? `No ${noun} yet.`)}</p>`
        : null
    }
    ${
      rows.length > 0
        ? html`<${DataTable} label=${label} columns=${columns} items=${rows} className=${className}
            rowProps=${rowProps ?? ((/** @type {any} */ item) => ({ 'data-id': item.id }))} />`
        : null
    }
    ${
      list.data
        ? html`<${Pager} search=${search} hasMore=${list.data.has_more} lastId=${rows[rows.length - 1]?.id} />`
        : null
    }`;
}

/** A resource's id as the link to its console page. @param {{ to: string, id: string }} props */
export const IdLink = ({ to, id }) => html`<a href=${href(to)}><code>${id}</code></a>`;

/**
 * The events a resource produced, each with its deliveries.
 * @param {string} subjectId @param {AbortSignal} signal
 */
export async function eventsAbout(subjectId, signal) {
  const query = { subject_id: subjectId, limit: 100 };
  const events = await answer(client.GET('/v1/events', { params: { query }, signal }));
  const deliveries = await Promise.all(
    events.data.map((ev) =>
      answer(client.GET('/v1/events/{id}/deliveries', { params: { path: { id: ev.id } }, signal })).then((d) => d.data),
    ),
  );
  return events.data.map((/** @type {any} */ ev, /** @type {number} */ i) => ({ ...ev, deliveries: deliveries[i] }));
}

/** @param {any[]} events as eventsAbout returns them */
export const anyDeliveryPending = (events) =>
  events.some((ev) => ev.deliveries.some((/** @type {any} */ d) => d.status === 'pending'));

/** What came back from an attempt: the status code, or why there was none. @param {any} a */
const answerOf = (a) => a.response_status ?? a.error ?? 'no answer';

/** @param {any} a an attempt */
const attemptLine = (a) => `attempt ${a.attempt}: ${answerOf(a)} in ${formatDuration(a.duration_ms)}`;

/** An attempt's answer in a table cell: the status code, or the failure in red. @param {{ attempt: any }} props */
const Answer = ({ attempt }) =>
  attempt.response_status === null ? html`<span class="bad">${answerOf(attempt)}</span>` : attempt.response_status;

/** When an attempt started: the title of its card on a phone. @type {import('../components.js').Column} */
export const ATTEMPT_STARTED_COLUMN = {
  label: 'Started',
  kind: 'title',
  cell: (a) => html`<${Time} at=${a.started_at} precise />`,
};

/**
 * The columns every table of attempts ends with: what came back, and how fast.
 * @type {import('../components.js').Column[]}
 */
export const ATTEMPT_OUTCOME_COLUMNS = [
  { label: 'Answer', kind: 'status', cell: (a) => html`<${Answer} attempt=${a} />` },
  { label: 'Latency', cell: (a) => formatDuration(a.duration_ms) },
  {
    label: 'Excerpt',
    kind: 'text',
    cell: (a) => (a.response_excerpt ? html`<code>${a.response_excerpt}</code>` : ''),
    full: (a) => a.response_excerpt,
  },
];

/** One delivery in a line: where it went and how it ended. @param {{ delivery: any }} props */
export function DeliveryLine({ delivery }) {
  const last = delivery.attempts[delivery.attempts.length - 1];
  return html`<li class="delivery-line">
    <${Badge} value=${delivery.status} /> to <span class="url">${delivery.url}</span>
    ${
      last
        ? html` <span class="muted">— ${attemptLine(last)}</span>`
        : html` <span class="muted">— not attempted yet</span>`
    }
  </li>`;
}

/** An event produced by a resource, linking to its page, with its deliveries. @param {{ event: any }} props */
export function EventSummary({ event }) {
  return html`<div class="event-summary">
    <a href=${href(`/events/${encodeURIComponent(event.id)}`)}><code>${event.type}</code></a>
    <span class="muted"> ${event.id}</span>
    ${
      event.deliveries.length === 0
        ? html`<p class="muted">No webhook endpoint was subscribed to it.</p>`
        : html`<ul class="deliveries">
            ${event.deliveries.map((/** @type {any} */ d) => html`<${DeliveryLine} delivery=${d} />`)}
          </ul>`
    }
  </div>`;
}

/** What the ledger billed, in words. @param {{ record: any }} props */
export const BillingLine = ({ record }) =>
  html`<span>Billed ${record.quantity} × ${record.kind.replaceAll('_', ' ')}</span>`;

/** A resource's billing as its own section (pages without a merged timeline). @param {{ records: any[] }} props */
export function BillingSection({ records }) {
  return html`<section aria-labelledby="billing-h">
    <h2 id="billing-h">Billing</h2>
    ${
      records.length === 0
        ? html`<p class="muted">Nothing billed.</p>`
        : html`<ul class="plain">
            ${records.map(
              (r) => html`<li>
                <${BillingLine} record=${r} /> <span class="muted">at <${Time} at=${r.occurred_at} precise /></span>
              </li>`,
            )}
          </ul>`
    }
  </section>`;
}

/** A resource's events as their own section. @param {{ events: any[], subjectId: string }} props */
export function EventsSection({ events, subjectId }) {
  return html`<section aria-labelledby="events-h">
    <h2 id="events-h">Events</h2>
    ${
      events.length === 0
        ? html`<p class="muted">No events yet.</p>`
        : events.map((ev) => html`<${EventSummary} event=${ev} />`)
    }
    <p><a href=${href(`/events?subject_id=${encodeURIComponent(subjectId)}`)}>All events about ${subjectId}</a></p>
  </section>`;
}

/** The account's phone numbers, for the "from" of a new message or call. */
export function useNumbers() {
  return (
    useLoad('numbers', (signal) =>
      answer(client.GET('/v1/phone_numbers', { params: { query: { limit: 100 } }, signal })),
    ).data?.data ?? []
  );
}

/**
 * A <select> of the account's numbers, each with its carrier.
 * @param {{ id: string, value: string, onChange: (v: string) => void, numbers: any[], required?: boolean,
 *   placeholder?: string }} props placeholder: the empty choice (default: none may be chosen)
 */
export function FromSelect({ id, value, onChange, numbers, required = true, placeholder }) {
  return html`<select id=${id} required=${required} value=${value}
    onChange=${(/** @type {any} */ e) => onChange(e.currentTarget.value)}>
    <option value="" disabled=${required}>${placeholder ?? 'Choose one of your numbers'}</option>
    ${numbers.map((n) => html`<option value=${n.number}>${n.number} (${n.carrier})</option>`)}
  </select>`;
}

/** How often the carriers' health is read again. */
const HEALTH_POLL_MS = 5000;

/**
 * The deployment's carriers and how each is doing: up, down (its recent requests
 * never reached it, and none is made until a probe) or being probed.
 */
export function CarrierHealth() {
  const carriers = useLoad('carriers', (signal) => answer(client.GET('/v1/carriers', { signal })), {
    poll: () => HEALTH_POLL_MS,
  });
  const list = carriers.data?.data ?? [];
  return html`<section class="carriers" aria-labelledby="carriers-h">
    <h2 id="carriers-h">Carriers</h2>
    <${ErrorBox} error=${carriers.error} />
    <ul class="carrier-health">
      ${list.map(
        (c) => html`<li data-carrier=${c.name} data-status=${c.status}>
          <strong>${c.name}</strong> <${Badge} value=${c.status} />
          <span class="muted"> ${c.carries.join(' and ')}</span>
          ${c.refusals > 0 ? html` <span class="muted">— ${c.refusals} refused in a row</span>` : null}
          ${c.status !== 'up' && c.last_refusal ? html`<div class="note">${c.last_refusal}</div>` : null}
          ${c.status !== 'up' && c.since ? html`<div class="muted">since <${Time} at=${c.since} /></div>` : null}
        </li>`,
      )}
    </ul>
  </section>`;
}
