// The console's pictures, drawn as small hand-written SVG: a call's ring plan as
// one bar per leg on a shared time axis, usage as stacked bars by kind, and an
// endpoint's recent attempts as latency bars marked by outcome. Each is an image
// with a text title; the pages show the same numbers in a table beside it.

import { html } from 'htm/preact';
import { formatBucket, formatDuration } from './time.js';

const W = 760;

/** A round step for about `count` ticks over `span`. @param {number} span @param {number} count */
function niceStep(span, count) {
  const raw = span / count;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= raw) ?? 10 * magnitude;
  return step;
}

/** @param {string | null | undefined} iso */
const ms = (iso) => (iso ? Date.parse(iso) : null);

/**
 * A call's legs as bars on one time axis: dialing (from the previous leg's end),
 * ringing, answered, and where each ended with its hangup cause.
 * @param {{ call: any, now: number, titleId: string }} props
 */
export function RingTimeline({ call, now, titleId }) {
  const created = /** @type {number} */ (ms(call.created_at));
  const known = [
    created,
    ms(call.ended_at),
    ...call.legs.flatMap((/** @type {any} */ l) => [ms(l.dialed_at), ms(l.answered_at), ms(l.ended_at)]),
  ];
  const times = /** @type {number[]} */ (known.filter((t) => t !== null));
  const t0 = Math.min(...times);
  const t1 = Math.max(...times, call.ended_at ? 0 : now, t0 + 1000);
  const LABEL = 200;
  const RIGHT = 16;
  const ROW = 44;
  const TOP = 8;
  const x = (/** @type {number} */ t) =>
    LABEL + ((Math.max(t0, Math.min(t, t1)) - t0) / (t1 - t0)) * (W - LABEL - RIGHT);
  const rows = call.to.map((/** @type {string} */ to, /** @type {number} */ position) => ({
    to,
    position,
    leg: call.legs.find((/** @type {any} */ l) => l.position === position) ?? null,
  }));
  const height = TOP + rows.length * ROW + 30;
  const step = niceStep((t1 - t0) / 1000, 6);
  const ticks = [];
  for (let s = 0; s <= (t1 - t0) / 1000 + 1e-9; s += step) ticks.push(s);

  /** @param {any} leg @param {number} position */
  const segments = (leg, position) => {
    const prev = rows[position - 1]?.leg;
    const dialStart = position === 0 ? created : (ms(prev?.ended_at) ?? created);
    const dialed = ms(leg.dialed_at);
    const answered = ms(leg.answered_at);
    const ended = ms(leg.ended_at);
    const out = [];
    const dialEnd = dialed ?? ended ?? now;
    if (dialEnd > dialStart) out.push({ kind: 'dialing', from: dialStart, to: dialEnd });
    if (dialed !== null) out.push({ kind: 'ringing', from: dialed, to: answered ?? ended ?? now });
    if (answered !== null) out.push({ kind: 'answered', from: answered, to: ended ?? now });
    return out;
  };

  return html`<svg class="chart ring-timeline" viewBox="0 0 ${W} ${height}" role="img" aria-labelledby=${titleId}>
    <title id=${titleId}>Ring timeline: ${rows.length} ring targets, ${call.legs.length} dialed</title>
    ${ticks.map(
      (s) => html`<g class="tick">
        <line x1=${x(t0 + s * 1000)} x2=${x(t0 + s * 1000)} y1=${TOP} y2=${height - 24} />
        <text x=${x(t0 + s * 1000)} y=${height - 8} text-anchor="middle">${s % 1 === 0 ? s : s.toFixed(1)} s</text>
      </g>`,
    )}
    ${rows.map(({ to, position, leg }) => {
      const y = TOP + position * ROW;
      const status = leg
        ? [leg.status.replaceAll('_', ' '), leg.hangup_cause].filter(Boolean).join(' · ')
        : 'not dialed';
      const label = html`<text class="leg-label" x="0" y=${y + 16}>${position + 1}. ${to}</text>
        <text class="leg-status" x="0" y=${y + 32}>${status}</text>`;
      if (!leg) return html`<g class="leg leg-undialed" data-position=${position}>${label}</g>`;
      const ended = ms(leg.ended_at);
      return html`<g class="leg" data-position=${position} data-status=${leg.status}>
        ${label}
        ${segments(leg, position).map(
          (seg) => html`<rect class="seg seg-${seg.kind}" data-kind=${seg.kind} x=${x(seg.from)} y=${y + 8}
              width=${Math.max(2, x(seg.to) - x(seg.from))} height="22" rx="3">
            <title>${seg.kind} ${formatDuration(seg.to - seg.from)}</title>
          </rect>`,
        )}
        ${
          ended !== null
            ? html`<line class="leg-end" x1=${x(ended)} x2=${x(ended)} y1=${y + 4} y2=${y + 34}>
              <title>ended: ${leg.hangup_cause ?? leg.status}</title>
            </line>`
            : null
        }
      </g>`;
    })}
  </svg>`;
}

/**
 * Horizontal gridlines every `step` up to `max`, labelled on the left.
 * @param {{ max: number, step: number, left: number, y: (v: number) => number, label: (v: number) => string }} props
 */
function Gridlines({ max, step, left, y, label }) {
  const values = [];
  for (let v = 0; v <= max; v += step) values.push(v);
  return values.map(
    (v) => html`<g class="tick">
      <line x1=${left} x2=${W - 8} y1=${y(v)} y2=${y(v)} />
      <text x=${left - 6} y=${y(v) + 4} text-anchor="end">${label(v)}</text>
    </g>`,
  );
}

/** The colour class of a series, by its place among the kinds shown. @param {number} i */
export const seriesClass = (i) => `series-${i % 8}`;

/**
 * Stacked bars: one per bucket, one colour per kind.
 * @param {{ buckets: { start: Date, values: Record<string, number> }[], kinds: string[], interval: string,
 *   titleId: string }} props
 */
export function UsageChart({ buckets, kinds, interval, titleId }) {
  const H = 240;
  const LEFT = 44;
  const BOTTOM = 28;
  const top = Math.max(1, ...buckets.map((b) => kinds.reduce((sum, k) => sum + (b.values[k] ?? 0), 0)));
  const step = niceStep(top, 4);
  const max = Math.ceil(top / step) * step;
  const band = (W - LEFT - 8) / Math.max(1, buckets.length);
  const y = (/** @type {number} */ v) => H - BOTTOM - (v / max) * (H - BOTTOM - 10);
  const every = Math.ceil(buckets.length / 8);
  return html`<svg class="chart usage-chart" viewBox="0 0 ${W} ${H}" role="img" aria-labelledby=${titleId}>
    <title id=${titleId}>Usage per ${interval} by kind</title>
    <${Gridlines} max=${max} step=${step} left=${LEFT} y=${y} label=${String} />
    ${buckets.map((b, i) => {
      let base = 0;
      return html`<g class="bucket" data-start=${b.start.toISOString()}>
        ${kinds.map((k, ki) => {
          const v = b.values[k] ?? 0;
          if (!v) return null;
          const rect = html`<rect class=${`bar ${seriesClass(ki)}`} x=${LEFT + i * band + band * 0.15}
              width=${band * 0.7} y=${y(base + v)} height=${y(base) - y(base + v)}>
            <title>${formatBucket(b.start, interval)}: ${v} ${k}</title>
          </rect>`;
          base += v;
          return rect;
        })}
        ${
          i % every === 0
            ? html`<text class="bucket-label" x=${LEFT + i * band + band / 2} y=${H - 8} text-anchor="middle">
              ${formatBucket(b.start, interval)}
            </text>`
            : null
        }
      </g>`;
    })}
  </svg>`;
}

/**
 * An endpoint's recent attempts, oldest to newest: bar height is latency, failed
 * attempts are red and marked with a cross.
 * @param {{ attempts: any[], titleId: string }} props newest first, as the API lists them
 */
export function AttemptsChart({ attempts, titleId }) {
  const H = 140;
  const BOTTOM = 20;
  const LEFT = 52;
  const shown = [...attempts].reverse();
  const top = Math.max(10, ...shown.map((a) => a.duration_ms));
  const step = niceStep(top, 3);
  const max = Math.ceil(top / step) * step;
  const band = (W - LEFT - 8) / Math.max(20, shown.length);
  const y = (/** @type {number} */ v) => H - BOTTOM - (v / max) * (H - BOTTOM - 14);
  return html`<svg class="chart attempts-chart" viewBox="0 0 ${W} ${H}" role="img" aria-labelledby=${titleId}>
    <title id=${titleId}>Latency of the last ${shown.length} attempts, oldest first; failures marked</title>
    <${Gridlines} max=${max} step=${step} left=${LEFT} y=${y} label=${formatDuration} />
    ${shown.map((a, i) => {
      const cx = LEFT + i * band + band / 2;
      const answer = a.response_status ?? a.error ?? 'no answer';
      return html`<g class=${a.succeeded ? 'attempt ok' : 'attempt failed'} data-attempt=${a.id}>
        <rect x=${LEFT + i * band + band * 0.15} width=${Math.max(1, band * 0.7)} y=${y(a.duration_ms)}
            height=${Math.max(1, y(0) - y(a.duration_ms))}>
          <title>${a.event_type} attempt ${a.attempt}: ${answer} in ${formatDuration(a.duration_ms)}</title>
        </rect>
        ${
          a.succeeded ? null : html`<text class="cross" x=${cx} y=${y(a.duration_ms) - 3} text-anchor="middle">×</text>`
        }
      </g>`;
    })}
    <text class="axis-note" x=${LEFT} y=${H - 4}>oldest</text>
    <text class="axis-note" x=${W - 8} y=${H - 4} text-anchor="end">newest</text>
  </svg>`;
}
