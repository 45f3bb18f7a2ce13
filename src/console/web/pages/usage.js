// Usage over time: the ledger's quantities per kind, as stacked bars per hour,
// day or month over a chosen period (GET /v1/usage?interval=), with the totals
// and every bucket in tables beside the chart.

import { html } from 'htm/preact';
import { answer, client, query } from '../api.js';
import { seriesClass, UsageChart } from '../charts.js';
import { DataTable, ErrorBox, Loading, useLoad, usePageTitle } from '../components.js';
import { formatBucket } from '../time.js';
import { setFilter } from './shared.js';

/** The periods offered, each with the bucket width it is drawn in. */
const PERIODS = /** @type {const} */ ({
  '24h': { label: 'Last 24 hours', interval: 'hour', count: 24 },
  '7d': { label: 'Last 7 days', interval: 'day', count: 7 },
  '30d': { label: 'Last 30 days', interval: 'day', count: 30 },
  '12m': { label: 'Last 12 months', interval: 'month', count: 12 },
});

/** A kind as words: sms_segment_outbound → sms segment outbound. @param {string} kind */
const words = (kind) => kind.replaceAll('_', ' ');

/** The UTC boundary `n` buckets after `start`. @param {Date} start @param {string} interval @param {number} n */
function step(start, interval, n) {
  if (interval === 'month') return new Date(Date.UTC(start.getUTCFullYear(), start.getUTCMonth() + n, 1));
  return new Date(start.getTime() + n * (interval === 'hour' ? 3_600_000 : 86_400_000));
}

/** The current bucket's start. @param {Date} now @param {string} interval */
function bucketOf(now, interval) {
  if (interval === 'month') return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
  if (interval === 'day') return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate()));
  return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate(), now.getUTCHours()));
}

/** @param {{ search: string }} props */
export function UsagePage({ search }) {
  usePageTitle('Usage');
  const chosen = /** @type {keyof typeof PERIODS} */ (new URLSearchParams(search).get('period') ?? '30d');
  const period = PERIODS[chosen] ?? PERIODS['30d'];
  const last = bucketOf(new Date(), period.interval);
  const from = step(last, period.interval, 1 - period.count);
  const to = step(last, period.interval, 1);
  const usageQuery = { from: from.toISOString(), to: to.toISOString(), interval: period.interval };
  // from and to are bucket boundaries, so the key (and what is loaded) only changes when a new bucket begins
  const usage = useLoad(`/v1/usage${query(usageQuery)}`, (signal) =>
    answer(client.GET('/v1/usage', { params: { query: usageQuery }, signal })),
  );
  const d = usage.data;
  const kinds = d ? d.data.map((/** @type {any} */ q) => q.kind) : [];
  const byStart = new Map((d?.buckets ?? []).map((/** @type {any} */ b) => [b.start, b.data]));
  const buckets = Array.from({ length: period.count }, (_, i) => {
    const start = step(from, period.interval, i);
    const values = Object.fromEntries(
      (byStart.get(start.toISOString()) ?? []).map((/** @type {any} */ q) => [q.kind, q.quantity]),
    );
    return { start, values };
  });
  return html`<main id="main">
    <h1 tabindex="-1">Usage</h1>
    <div class="filters">
      <div class="field">
        <label for="usage-period">Period</label>
        <select id="usage-period" value=${chosen}
          onChange=${(/** @type {any} */ e) => setFilter(search, 'period', e.currentTarget.value)}>
          ${Object.entries(PERIODS).map(([value, p]) => html`<option value=${value}>${p.label}</option>`)}
        </select>
      </div>
    </div>
    <${ErrorBox} error=${usage.error} />
    ${usage.loading ? html`<${Loading} />` : null}
    ${
      d
        ? html`${kinds.length === 0 ? html`<p class="muted">Nothing billed in this period.</p>` : null}
        <${UsageChart} buckets=${buckets} kinds=${kinds} interval=${period.interval} titleId="usage-title" />
        <${DataTable} label="Totals" className="totals" caption=${`Totals, ${period.label.toLowerCase()}`}
          items=${d.data.map((/** @type {any} */ q, /** @type {number} */ i) => ({ ...q, i }))}
          rowProps=${(/** @type {any} */ q) => ({ 'data-kind': q.kind })}
          columns=${[
            {
              label: 'Kind',
              kind: 'title',
              cell: (/** @type {any} */ q) => html`<span class=${`swatch ${seriesClass(q.i)}`}></span>${words(q.kind)}`,
            },
            { label: 'Quantity', cell: (/** @type {any} */ q) => q.quantity },
          ]} />
        ${
          kinds.length > 0
            ? html`<details>
              <summary>Every ${period.interval}</summary>
              <${DataTable} label=${`Usage per ${period.interval}`} items=${buckets}
                columns=${[
                  {
                    label: period.interval,
                    kind: 'title',
                    rowHeader: true,
                    cell: (/** @type {any} */ b) => formatBucket(b.start, period.interval),
                  },
                  ...kinds.map((/** @type {string} */ k) => ({
                    label: words(k),
                    cell: (/** @type {any} */ b) => b.values[k] ?? 0,
                  })),
                ]} />
            </details>`
            : null
        }`
        : null
    }
  </main>`;
}
