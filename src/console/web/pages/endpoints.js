// Webhook endpoints: the list with a form to add one (its signing secret shown
// once), and an endpoint's page: enable or disable it, rotate its secret (the new
// one shown once), delete it, and its health — success rate and latency of its
// recent attempts as a chart, consecutive failures, why it was disabled — with
// every attempt in a paged table.

import { html } from 'htm/preact';
import { useState } from 'preact/hooks';
import { api, idempotencyKey, query } from '../api.js';
import { AttemptsChart } from '../charts.js';
import { Badge, ErrorBox, Facts, Loading, Pager, SecretOnce, TableWrap, Time, useLoad, usePageTitle } from '../components.js';
import { href, navigate } from '../router.js';
import { formatDuration } from '../time.js';
import { listPath, PAGE_SIZE, useEnum } from './shared.js';

/** @param {{ e: any }} props */
const EnabledBadge = ({ e }) => html`<${Badge} value=${e.enabled ? 'enabled' : 'disabled'} />`;

/** @param {{ search: string }} props */
export function EndpointList({ search }) {
  usePageTitle('Webhook endpoints');
  const path = listPath('/v1/webhook_endpoints', search, []);
  const list = useLoad(path, (signal) => api(path, { signal }));
  const [created, setCreated] = useState(/** @type {any} */ (null));
  const rows = list.data?.data ?? [];
  return html`<main id="main">
    <h1 tabindex="-1">Webhook endpoints</h1>
    <${AddEndpoint} key=${created?.id ?? 'new'} onCreated=${(/** @type {any} */ e) => {
      setCreated(e);
      list.reload();
    }} />
    ${created
      ? html`<${SecretOnce} title=${`Endpoint ${created.url} added. Its signing secret:`} secret=${created.secret}>
          <p><a href=${href(`/webhooks/${encodeURIComponent(created.id)}`)}>Open the endpoint</a></p>
        <//>`
      : null}
    <${ErrorBox} error=${list.error} />
    ${list.loading ? html`<${Loading} />` : null}
    ${list.data && rows.length === 0 ? html`<p class="muted">No endpoints yet: add one to receive events.</p>` : null}
    ${rows.length > 0
      ? html`<${TableWrap} label="Webhook endpoints">
          <table class="list">
            <thead><tr><th scope="col">URL</th><th scope="col">State</th><th scope="col">Events</th>
              <th scope="col">Failures in a row</th><th scope="col">Created</th></tr></thead>
            <tbody>
              ${rows.map(
                (/** @type {any} */ e) => html`<tr data-id=${e.id}>
                  <td><a href=${href(`/webhooks/${encodeURIComponent(e.id)}`)}>${e.url}</a>${e.description ? html`<div class="muted">${e.description}</div>` : null}</td>
                  <td><${EnabledBadge} e=${e} /></td>
                  <td>${e.event_types.length ? e.event_types.join(', ') : 'all'}</td>
                  <td>${e.consecutive_failures}</td>
                  <td><${Time} at=${e.created_at} /></td>
                </tr>`,
              )}
            </tbody>
          </table>
        <//>`
      : null}
    ${list.data ? html`<${Pager} search=${search} hasMore=${list.data.has_more} lastId=${rows[rows.length - 1]?.id} />` : null}
  </main>`;
}

/** @param {{ onCreated: (endpoint: any) => void }} props */
function AddEndpoint({ onCreated }) {
  const [url, setUrl] = useState('');
  const [description, setDescription] = useState('');
  const [types, setTypes] = useState(/** @type {string[]} */ ([]));
  const [key] = useState(idempotencyKey);
  const [error, setError] = useState(/** @type {Error | null} */ (null));
  const [busy, setBusy] = useState(false);
  const all = useEnum('/v1/events', 'type');
  /** @param {Event} e */
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const body = { url: url.trim(), ...(description.trim() ? { description: description.trim() } : {}), ...(types.length ? { event_types: types } : {}) };
      onCreated(await api('/v1/webhook_endpoints', { method: 'POST', body, idempotencyKey: key }));
    } catch (err) {
      setError(/** @type {Error} */ (err));
      setBusy(false);
    }
  };
  /** @param {string} t @param {boolean} on */
  const toggle = (t, on) => setTypes((now) => (on ? [...now, t] : now.filter((x) => x !== t)));
  return html`<details class="compose">
    <summary>Add an endpoint</summary>
    <form onSubmit=${submit}>
      <div class="field wide"><label for="ep-url">URL</label>
        <input id="ep-url" type="url" required placeholder="https://example.com/webhooks" value=${url} onInput=${(/** @type {any} */ e) => setUrl(e.currentTarget.value)} /></div>
      <div class="field wide"><label for="ep-description">Description (optional)</label>
        <input id="ep-description" maxlength="500" value=${description} onInput=${(/** @type {any} */ e) => setDescription(e.currentTarget.value)} /></div>
      <fieldset class="wide">
        <legend>Events to send (none chosen: every type)</legend>
        <div class="checks">
          ${all.map(
            (t) => html`<label class="check"><input type="checkbox" checked=${types.includes(t)}
              onChange=${(/** @type {any} */ e) => toggle(t, e.currentTarget.checked)} /> <code>${t}</code></label>`,
          )}
        </div>
      </fieldset>
      <button type="submit" disabled=${busy}>${busy ? 'Adding…' : 'Add endpoint'}</button>
    </form>
    <${ErrorBox} error=${error} />
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
  return html`<section aria-labelledby="health-h">
    <h2 id="health-h">Health</h2>
    <dl class="stats">
      <div><dt>Success rate</dt><dd data-stat="success-rate">${attempts.length ? `${Math.round((100 * ok) / attempts.length)}%` : '—'}</dd>
        <dd class="muted">of the last ${attempts.length} attempt${attempts.length === 1 ? '' : 's'}</dd></div>
      <div><dt>Median latency</dt><dd>${attempts.length ? formatDuration(percentile(latencies, 0.5)) : '—'}</dd></div>
      <div><dt>95th percentile</dt><dd>${attempts.length ? formatDuration(percentile(latencies, 0.95)) : '—'}</dd></div>
      <div><dt>Failures in a row</dt><dd data-stat="consecutive-failures">${endpoint.consecutive_failures}</dd></div>
    </dl>
    ${endpoint.enabled
      ? null
      : html`<p class="error" role="status">Disabled${endpoint.disabled_reason ? html` (<span data-stat="disabled-reason">${endpoint.disabled_reason.replaceAll('_', ' ')}</span>)` : ''}
          ${endpoint.disabled_at ? html` since <${Time} at=${endpoint.disabled_at} />` : ''}: no events are sent to it; those that happen meanwhile are kept as skipped deliveries.</p>`}
    ${attempts.length ? html`<${AttemptsChart} attempts=${attempts} titleId="attempts-title" />` : html`<p class="muted">No attempts yet.</p>`}
  </section>`;
}

/** @param {{ params: { id: string }, search: string }} props */
export function EndpointPage({ params, search }) {
  const id = params.id;
  usePageTitle(`Endpoint ${id}`);
  const path = `/v1/webhook_endpoints/${encodeURIComponent(id)}`;
  const endpoint = useLoad(path, async (signal) => {
    const [e, recent] = await Promise.all([api(path, { signal }), api(`${path}/attempts?limit=100`, { signal })]);
    return { e, recent: recent.data };
  });
  const attemptsPath = `${path}/attempts${query({ limit: PAGE_SIZE, starting_after: new URLSearchParams(search).get('starting_after') })}`;
  const attempts = useLoad(attemptsPath, (signal) => api(attemptsPath, { signal }));
  const [secret, setSecret] = useState(/** @type {string | null} */ (null));
  const [confirming, setConfirming] = useState(/** @type {'rotate' | 'delete' | null} */ (null));
  const [action, setAction] = useState(/** @type {{ busy: boolean, error: Error | null }} */ ({ busy: false, error: null }));
  /** @param {() => Promise<void>} fn */
  const act = async (fn) => {
    setAction({ busy: true, error: null });
    try {
      await fn();
      setAction({ busy: false, error: null });
    } catch (err) {
      setAction({ busy: false, error: /** @type {Error} */ (err) });
    }
    setConfirming(null);
  };
  const setEnabled = (/** @type {boolean} */ enabled) =>
    act(async () => {
      await api(path, { method: 'PATCH', body: { enabled } });
      endpoint.reload();
    });
  const rotate = () =>
    act(async () => {
      setSecret((await api(`${path}/rotate_secret`, { method: 'POST' })).secret);
      endpoint.reload();
    });
  const remove = () =>
    act(async () => {
      await api(path, { method: 'DELETE' });
      navigate(href('/webhooks'), { replace: true });
    });
  const d = endpoint.data;
  const rows = attempts.data?.data ?? [];
  return html`<main id="main">
    <p class="crumbs"><a href=${href('/webhooks')}>Webhook endpoints</a></p>
    <h1 tabindex="-1">Endpoint <code>${id}</code></h1>
    <${ErrorBox} error=${endpoint.error} />
    ${endpoint.loading ? html`<${Loading} />` : null}
    ${d
      ? html`<p class="status-line">State <${EnabledBadge} e=${d.e} /></p>
        <${Facts}
          items=${[
            ['URL', html`<span class="url">${d.e.url}</span>`],
            ['Description', d.e.description],
            ['Events', d.e.event_types.length ? d.e.event_types.join(', ') : 'every type'],
            ['Created', html`<${Time} at=${d.e.created_at} />`],
          ]}
        />
        <div class="actions" role="group" aria-label="Endpoint actions">
          ${d.e.enabled
            ? html`<button type="button" disabled=${action.busy} onClick=${() => setEnabled(false)}>Disable</button>`
            : html`<button type="button" disabled=${action.busy} onClick=${() => setEnabled(true)}>Enable</button>`}
          <button type="button" disabled=${action.busy} onClick=${() => setConfirming('rotate')}>Rotate secret…</button>
          <button type="button" class="danger" disabled=${action.busy} onClick=${() => setConfirming('delete')}>Delete…</button>
        </div>
        ${confirming === 'rotate'
          ? html`<div class="confirm" role="group" aria-label="Confirm rotation">
              <p>A new signing secret replaces the current one; for 24 hours every request is signed with both, so your receiver can switch over.</p>
              <button type="button" onClick=${rotate}>Rotate now</button> <button type="button" onClick=${() => setConfirming(null)}>Cancel</button>
            </div>`
          : null}
        ${confirming === 'delete'
          ? html`<div class="confirm" role="group" aria-label="Confirm deletion">
              <p>Deleting stops every delivery to this URL. It cannot be undone.</p>
              <button type="button" class="danger" onClick=${remove}>Delete endpoint</button> <button type="button" onClick=${() => setConfirming(null)}>Cancel</button>
            </div>`
          : null}
        ${secret ? html`<${SecretOnce} title="The new signing secret:" secret=${secret} />` : null}
        <${ErrorBox} error=${action.error} />
        <${Health} endpoint=${d.e} attempts=${d.recent} />
        <section aria-labelledby="attempts-h">
          <h2 id="attempts-h">Attempts</h2>
          <${ErrorBox} error=${attempts.error} />
          ${rows.length > 0
            ? html`<${TableWrap} label="Attempts">
                <table class="list attempts">
                  <thead><tr><th scope="col">Started</th><th scope="col">Event</th><th scope="col">#</th><th scope="col">Answer</th>
                    <th scope="col">Latency</th><th scope="col">Excerpt</th></tr></thead>
                  <tbody>
                    ${rows.map(
                      (/** @type {any} */ a) => html`<tr data-id=${a.id} class=${a.succeeded ? '' : 'row-failed'}>
                        <td><${Time} at=${a.started_at} precise /></td>
                        <td><a href=${href(`/events/${encodeURIComponent(a.event_id)}`)}><code>${a.event_type}</code></a></td>
                        <td>${a.attempt}${a.trigger === 'redeliver' ? ' (redeliver)' : ''}</td>
                        <td>${a.response_status === null ? html`<span class="bad">${a.error ?? 'no answer'}</span>` : a.response_status}</td>
                        <td>${formatDuration(a.duration_ms)}</td>
                        <td class="excerpt"><code>${a.response_excerpt ?? ''}</code></td>
                      </tr>`,
                    )}
                  </tbody>
                </table>
              <//>`
            : attempts.data ? html`<p class="muted">No attempts yet.</p>` : null}
          ${attempts.data ? html`<${Pager} search=${search} hasMore=${attempts.data.has_more} lastId=${rows[rows.length - 1]?.id} />` : null}
        </section>`
      : null}
  </main>`;
}
