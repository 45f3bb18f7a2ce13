// Webhook endpoints: the list with a form to add one (its signing secret shown
// once), and an endpoint's page: enable or disable it, rotate its secret (the new
// one shown once), send it a test event, recover what it missed since a moment,
// delete it, and its health — success rate and latency of its recent attempts as
// a chart, consecutive failures, why it was disabled — with every attempt in a
// paged table.

import { html } from 'htm/preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { answer, client, idempotencyKey } from '../api.js';
import { AttemptsChart } from '../charts.js';
import {
  Badge,
  DataTable,
  ErrorBox,
  Facts,
  Loading,
  SecretOnce,
  Time,
  useLoad,
  usePageTitle,
  useSubmit,
} from '../components.js';
import { href, navigate } from '../router.js';
import { formatDuration, fromMomentInput, MOMENT_FORMAT, timeZone, toMomentInput } from '../time.js';
import { ATTEMPT_OUTCOME_COLUMNS, ATTEMPT_STARTED_COLUMN, ListView, PAGE_SIZE, useEnum, useList } from './shared.js';

/** @param {{ e: any }} props */
const EnabledBadge = ({ e }) => html`<${Badge} value=${e.enabled ? 'enabled' : 'disabled'} />`;

/** An endpoint's subscriptions in words. @param {any} e */
const eventsOf = (e) => (e.event_types.length ? e.event_types.join(', ') : 'every type');

/** @type {import('../components.js').Column[]} */
const COLUMNS = [
  {
    label: 'URL',
    kind: 'title',
    cell: (e) => html`<div class="clip" title=${e.url}>
        <a class="url" href=${href(`/webhooks/${encodeURIComponent(e.id)}`)}>${e.url}</a>
      </div>
      ${e.description ? html`<div class="clip muted" title=${e.description}>${e.description}</div>` : null}`,
  },
  { label: 'State', kind: 'status', cell: (e) => html`<${EnabledBadge} e=${e} />` },
  { label: 'Events', kind: 'text', cell: eventsOf, full: eventsOf },
  { label: 'Failures in a row', cell: (e) => e.consecutive_failures },
  { label: 'Created', cell: (e) => html`<${Time} at=${e.created_at} />` },
];

/** @param {{ search: string }} props */
export function EndpointList({ search }) {
  usePageTitle('Webhook endpoints');
  const list = useList('/v1/webhook_endpoints', search, []);
  const [created, setCreated] = useState(/** @type {any} */ (null));
  return html`<main id="main">
    <h1 tabindex="-1">Webhook endpoints</h1>
    <${AddEndpoint} key=${created?.id ?? 'new'} onCreated=${(/** @type {any} */ e) => {
      setCreated(e);
      list.reload();
    }} />
    ${
      created
        ? html`<${SecretOnce} title=${`Endpoint ${created.url} added. Its signing secret:`} secret=${created.secret}>
          <p><a href=${href(`/webhooks/${encodeURIComponent(created.id)}`)}>Open the endpoint</a></p>
        <//>`
        : null
    }
    <${ListView} list=${list} search=${search} label="Endpoints" empty="No endpoints yet: add one to receive events."
      columns=${COLUMNS} className="endpoints" />
  </main>`;
}

/** @param {{ onCreated: (endpoint: any) => void }} props */
function AddEndpoint({ onCreated }) {
  const [url, setUrl] = useState('');
  const [description, setDescription] = useState('');
  // The API's own list of event types (useEnum reads it from the OpenAPI document).
  const [types, setTypes] = useState(/** @type {import('../api.js').EventType[]} */ ([]));
  const [key] = useState(idempotencyKey);
  const submit = useSubmit();
  const all = /** @type {import('../api.js').EventType[]} */ (useEnum('/v1/events', 'type'));
  /** @param {Event} e */
  const add = (e) => {
    e.preventDefault();
    submit.run(async () => {
      const body = {
        url: url.trim(),
        ...(description.trim() ? { description: description.trim() } : {}),
        ...(types.length ? { event_types: types } : {}),
      };
      onCreated(
        await answer(client.POST('/v1/webhook_endpoints', { params: { header: { 'idempotency-key': key } }, body })),
      );
    });
  };
  /** @param {import('../api.js').EventType} t @param {boolean} on */
  const toggle = (t, on) => setTypes((now) => (on ? [...now, t] : now.filter((x) => x !== t)));
  return html`<details class="compose">
    <summary>Add an endpoint</summary>
    <form onSubmit=${add}>
      <div class="field wide"><label for="ep-url">URL</label>
        <input id="ep-url" type="url" required placeholder="https://example.com/webhooks" value=${url}
          onInput=${(/** @type {any} */ e) => setUrl(e.currentTarget.value)} /></div>
      <div class="field wide"><label for="ep-description">Description (optional)</label>
        <input id="ep-description" maxlength="500" value=${description}
          onInput=${(/** @type {any} */ e) => setDescription(e.currentTarget.value)} /></div>
      <fieldset class="full">
        <legend>Events to send (none chosen: every type)</legend>
        <div class="checks">
          ${all.map(
            (t) => html`<label class="check"><input type="checkbox" checked=${types.includes(t)}
              onChange=${(/** @type {any} */ e) => toggle(t, e.currentTarget.checked)} /> <code>${t}</code></label>`,
          )}
        </div>
      </fieldset>
      <button type="submit" class="primary" disabled=${submit.busy}>${submit.busy ? 'Adding…' : 'Add endpoint'}</button>
    </form>
    <${ErrorBox} error=${submit.error} />
  </details>`;
}

/** @param {number[]} values @param {number} p 0..1 */
function percentile(values, p) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? 0;
}

/** @param {{ endpoint: any, attempts: any[] }} props */
function Health({ endpoint, attempts }) {
  const ok = attempts.filter((a) => a.succeeded).length;
  const latencies = attempts.map((a) => a.duration_ms);
  const rate = attempts.length ? `${Math.round((100 * ok) / attempts.length)}%` : '—';
  const reason = endpoint.disabled_reason?.replaceAll('_', ' ');
  return html`<section aria-labelledby="health-h">
    <h2 id="health-h">Health</h2>
    <dl class="stats">
      <div><dt>Success rate</dt><dd data-stat="success-rate">${rate}</dd>
        <dd class="muted">of the last ${attempts.length} attempt${attempts.length === 1 ? '' : 's'}</dd></div>
      <div><dt>Median latency</dt><dd>${attempts.length ? formatDuration(percentile(latencies, 0.5)) : '—'}</dd></div>
      <div><dt>95th percentile</dt><dd>${attempts.length ? formatDuration(percentile(latencies, 0.95)) : '—'}</dd></div>
      <div><dt>Failures in a row</dt><dd data-stat="consecutive-failures">${endpoint.consecutive_failures}</dd></div>
    </dl>
    ${
      endpoint.enabled
        ? null
        : html`<p class="error" role="status">
            Disabled${reason ? html` (<span data-stat="disabled-reason">${reason}</span>)` : ''}
            ${endpoint.disabled_at ? html` since <${Time} at=${endpoint.disabled_at} />` : ''}: no events are sent
            to it; those that happen meanwhile are kept as skipped deliveries.
          </p>`
    }
    ${
      attempts.length
        ? html`<${AttemptsChart} attempts=${attempts} titleId="attempts-title" />`
        : html`<p class="muted">No attempts yet.</p>`
    }
  </section>`;
}

/** The recoveries table's columns. @type {import('../components.js').Column[]} */
const RECOVERY_COLUMNS = [
  { label: 'Asked', kind: 'title', cell: (r) => html`<${Time} at=${r.created_at} />` },
  { label: 'Since', cell: (r) => html`<${Time} at=${r.since} />` },
  { label: 'State', kind: 'status', cell: (r) => html`<${Badge} value=${r.status} />` },
  { label: 'Re-sent', cell: (r) => html`<span data-stat="resent">${r.resent}</span>` },
  { label: 'Why it stopped', cell: (r) => r.stopped_reason?.replaceAll('_', ' ') ?? '' },
];

/** How often to look at a running recovery's progress. */
const RECOVERY_POLL_MS = 1000;

/**
 * Recover since…: re-sends, in the background, every delivery to this endpoint that failed or was skipped since
 * a moment; its recent recoveries with their progress, looked at again while one runs. `onProgress` is told
 * each time a recovery moves (it re-sent one more, or ended), so the page's health and attempts follow it.
 * @param {{ id: string, enabled: boolean, onProgress: () => void }} props
 */
function Recover({ id, enabled, onProgress }) {
  const [since, setSince] = useState(() => toMomentInput(new Date(Date.now() - 3_600_000)));
  const path = { id };
  const recoveries = useLoad(
    `recoveries ${id}`,
    (signal) => answer(client.GET('/v1/webhook_endpoints/{id}/recoveries', { params: { path }, signal })),
    { poll: (d) => (d.data.some((/** @type {any} */ r) => r.status === 'running') ? RECOVERY_POLL_MS : null) },
  );
  const rows = recoveries.data?.data ?? [];
  const progress = rows.map((/** @type {any} */ r) => `${r.id} ${r.status} ${r.resent}`).join();
  const seen = useRef(/** @type {string | null} */ (null));
  useEffect(() => {
    if (!recoveries.data) return;
    if (seen.current !== null && seen.current !== progress) onProgress();
    seen.current = progress;
  }, [progress]);
  const submit = useSubmit();
  /** @param {Event} e */
  const start = (e) => {
    e.preventDefault();
    submit.run(async () => {
      const at = fromMomentInput(since);
      if (!at)
        throw new Error(`Write the moment as ${MOMENT_FORMAT} on a 24-hour clock, e.g. ${toMomentInput(new Date())}.`);
      await answer(client.POST('/v1/webhook_endpoints/{id}/recover', { params: { path }, body: { since: at } }));
      recoveries.reload();
    });
  };
  return html`<section aria-labelledby="recover-h">
    <h2 id="recover-h">Recover</h2>
    <p class="muted">
      Re-sends every delivery to this endpoint that failed or was skipped since the moment you choose, oldest first,
      with the original event ids; it stops at the first that fails.
    </p>
    <form class="inline" onSubmit=${start} noValidate>
      <div class="field"><label for="recover-since">Recover since</label>
        <small id="recover-since-help" class="muted">${MOMENT_FORMAT}, 24-hour, your time (${timeZone()})</small>
        <input id="recover-since" class="moment" required spellcheck="false" autocomplete="off"
          aria-describedby="recover-since-help" placeholder=${MOMENT_FORMAT} value=${since}
          onInput=${(/** @type {any} */ e) => setSince(e.currentTarget.value)} /></div>
      <button type="submit" class="primary" disabled=${submit.busy || !enabled}>
        ${submit.busy ? 'Starting…' : 'Recover'}
      </button>
      ${enabled ? null : html`<span class="muted">Enable the endpoint first.</span>`}
    </form>
    <${ErrorBox} error=${submit.error} />
    <${ErrorBox} error=${recoveries.error} />
    ${
      rows.length
        ? html`<${DataTable} label="Recoveries" columns=${RECOVERY_COLUMNS} items=${rows}
            rowProps=${(/** @type {any} */ r) => ({ 'data-recovery': r.id })} />`
        : null
    }
  </section>`;
}

/** The attempts table's columns. @type {import('../components.js').Column[]} */
const ATTEMPT_COLUMNS = [
  ATTEMPT_STARTED_COLUMN,
  {
    label: 'Event',
    cell: (a) => html`<a href=${href(`/events/${encodeURIComponent(a.event_id)}`)}><code>${a.event_type}</code></a>`,
  },
  { label: '#', cell: (a) => `${a.attempt}${a.trigger === 'redeliver' ? ' (redeliver)' : ''}` },
  ...ATTEMPT_OUTCOME_COLUMNS,
];

/** How many attempts the health figures are drawn from. */
const RECENT = 100;
/** After Send test event, how often and how many times to look for its attempt before giving up. */
const WATCH_MS = 1000;
const WATCH_LOOKS = 30;

/** @param {{ params: { id: string }, search: string }} props */
export function EndpointPage({ params, search }) {
  const id = params.id;
  usePageTitle(`Endpoint ${id}`);
  // The test event being waited for (its attempt), and how many more looks it gets.
  const watch = useRef(/** @type {{ eventId: string, looks: number } | null} */ (null));
  // The endpoint and its recent attempts in one load: Health is drawn from them, and so is the first page of
  // Attempts, so the two always show the same moment and cannot contradict each other.
  const endpoint = useLoad(
    `/v1/webhook_endpoints/${encodeURIComponent(id)}`,
    async (signal) => {
      const [e, recent] = await Promise.all([
        answer(client.GET('/v1/webhook_endpoints/{id}', { params: { path: { id } }, signal })),
        answer(
          client.GET('/v1/webhook_endpoints/{id}/attempts', {
            params: { path: { id }, query: { limit: RECENT } },
            signal,
          }),
        ),
      ]);
      const firstPage = {
        data: recent.data.slice(0, PAGE_SIZE),
        has_more: recent.data.length > PAGE_SIZE || recent.has_more,
      };
      return { e, recent: recent.data, firstPage };
    },
    {
      poll: (d) => {
        const w = watch.current;
        if (!w) return null;
        if (d.recent.some((/** @type {any} */ a) => a.event_id === w.eventId) || --w.looks <= 0) {
          watch.current = null;
          return null;
        }
        return WATCH_MS;
      },
    },
  );
  // an older page of attempts (Older in the pager) is a request of its own
  const cursor = new URLSearchParams(search).get('starting_after');
  const older = useLoad(cursor ? `attempts ${id} ${cursor}` : null, (signal) =>
    answer(
      client.GET('/v1/webhook_endpoints/{id}/attempts', {
        params: { path: { id }, query: { limit: PAGE_SIZE, starting_after: cursor ?? '' } },
        signal,
      }),
    ),
  );
  const [secret, setSecret] = useState(/** @type {string | null} */ (null));
  const [tested, setTested] = useState(/** @type {string | null} */ (null));
  const [confirming, setConfirming] = useState(/** @type {'rotate' | 'delete' | null} */ (null));
  const action = useSubmit();
  /** @param {() => Promise<void>} fn */
  const act = (fn) => action.run(fn).then(() => setConfirming(null));
  const setEnabled = (/** @type {boolean} */ enabled) =>
    act(async () => {
      await answer(client.PATCH('/v1/webhook_endpoints/{id}', { params: { path: { id } }, body: { enabled } }));
      endpoint.reload();
    });
  const rotate = () =>
    act(async () => {
      const rotated = await answer(
        client.POST('/v1/webhook_endpoints/{id}/rotate_secret', { params: { path: { id } } }),
      );
      setSecret(rotated.secret ?? null);
      endpoint.reload();
    });
  const sendTest = () =>
    act(async () => {
      const { event_id } = await answer(client.POST('/v1/webhook_endpoints/{id}/test', { params: { path: { id } } }));
      setTested(event_id);
      // its attempt comes once the worker has made it: look again until it is in
      watch.current = { eventId: event_id, looks: WATCH_LOOKS };
      endpoint.reload();
    });
  const remove = () =>
    act(async () => {
      await answer(client.DELETE('/v1/webhook_endpoints/{id}', { params: { path: { id } } }));
      navigate(href('/webhooks'), { replace: true });
    });
  const d = endpoint.data;
  const attempts = cursor ? older : { data: d?.firstPage ?? null, error: endpoint.error, loading: endpoint.loading };
  return html`<main id="main">
    <p class="crumbs"><a href=${href('/webhooks')}>Webhook endpoints</a></p>
    <h1 tabindex="-1">Endpoint <code>${id}</code></h1>
    <${ErrorBox} error=${endpoint.error} />
    ${endpoint.loading ? html`<${Loading} />` : null}
    ${
      d
        ? html`<p class="status-line">State <${EnabledBadge} e=${d.e} /></p>
        <${Facts}
          items=${[
            ['URL', html`<span class="url">${d.e.url}</span>`],
            ['Description', d.e.description],
            ['Events', eventsOf(d.e)],
            ['Created', html`<${Time} at=${d.e.created_at} />`],
          ]}
        />
        <p class="muted">
          ${'Each event comes at least once, and may come again. '}<a href="/docs/inbox">Run your handler once per
          event</a> with <code>@handset/inbox</code>.
        </p>
        <div class="actions" role="group" aria-label="Endpoint actions">
          ${
            d.e.enabled
              ? html`<button type="button" class="caution" disabled=${action.busy} onClick=${() => setEnabled(false)}>
                  Disable
                </button>`
              : html`<button type="button" class="primary" disabled=${action.busy} onClick=${() => setEnabled(true)}>
                  Enable
                </button>`
          }
          <button type="button" disabled=${action.busy || !d.e.enabled} onClick=${sendTest}>Send test event</button>
          <button type="button" class="caution" disabled=${action.busy} onClick=${() => setConfirming('rotate')}>
            Rotate secret…
          </button>
          <button type="button" class="danger" disabled=${action.busy} onClick=${() => setConfirming('delete')}>
            Delete…
          </button>
        </div>
        ${
          confirming === 'rotate'
            ? html`<div class="confirm" role="group" aria-label="Confirm rotation">
              <p>
                A new signing secret replaces the current one; for 24 hours every request is signed with both, so
                your receiver can switch over.
              </p>
              <button type="button" class="caution strong" onClick=${rotate}>Rotate now</button>
              <button type="button" onClick=${() => setConfirming(null)}>Cancel</button>
            </div>`
            : null
        }
        ${
          confirming === 'delete'
            ? html`<div class="confirm" role="group" aria-label="Confirm deletion">
              <p>Deleting stops every delivery to this URL. It cannot be undone.</p>
              <button type="button" class="danger strong" onClick=${remove}>Delete endpoint</button>
              <button type="button" onClick=${() => setConfirming(null)}>Cancel</button>
            </div>`
            : null
        }
        ${secret ? html`<${SecretOnce} title="The new signing secret:" secret=${secret} />` : null}
        ${
          tested
            ? html`<p role="status" class="notice">
              Test event <a href=${href(`/events/${encodeURIComponent(tested)}`)}><code>${tested}</code></a> queued to
              this endpoint only.
            </p>`
            : null
        }
        <${ErrorBox} error=${action.error} />
        <${Health} endpoint=${d.e} attempts=${d.recent} />
        <${Recover} id=${id} enabled=${d.e.enabled} onProgress=${endpoint.reload} />
        <section aria-labelledby="attempts-h">
          <h2 id="attempts-h">Attempts</h2>
          <${ListView} list=${attempts} search=${search} label="Attempts" columns=${ATTEMPT_COLUMNS}
            rowProps=${(/** @type {any} */ a) => ({ 'data-id': a.id, class: a.succeeded ? undefined : 'row-failed' })} />
        </section>`
        : null
    }
  </main>`;
}
