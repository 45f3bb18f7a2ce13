// Pieces every page uses: loading data from the API (with polling while something
// is still changing), errors as the API's problem detail, status badges, times,
// tables that become cards on a phone, cursor paging, and a secret shown once.

import { html } from 'htm/preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { navigate } from './router.js';
import { formatPrecise, formatTime } from './time.js';

/**
 * Loads `load()` whenever `key` changes, and again every `poll(data)` ms while
 * that returns a number. Data of a previous key is never shown for a new one.
 * @template T
 * @param {string | null} key what is being loaded (null: nothing yet)
 * @param {(signal: AbortSignal) => Promise<T>} load
 * @param {{ poll?: (data: T) => number | null }} [opts]
 * @returns {{ data: T | null, error: Error | null, loading: boolean, reload: () => void }}
 */
export function useLoad(key, load, opts = {}) {
  const [state, setState] = useState(
    /** @type {{ key: string | null, data: T | null, error: Error | null }} */ ({ key: null, data: null, error: null }),
  );
  const [tick, setTick] = useState(0);
  const latest = useRef({ load, opts });
  latest.current = { load, opts };
  useEffect(() => {
    if (key === null) return undefined;
    const ctrl = new AbortController();
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    let timer;
    const run = async () => {
      try {
        const data = await latest.current.load(ctrl.signal);
        if (ctrl.signal.aborted) return;
        setState({ key, data, error: null });
        const ms = latest.current.opts.poll?.(data);
        if (ms) timer = setTimeout(run, ms);
      } catch (err) {
        if (ctrl.signal.aborted) return;
        setState((s) => ({ key, data: s.key === key ? s.data : null, error: /** @type {Error} */ (err) }));
      }
    };
    run();
    return () => {
      ctrl.abort();
      clearTimeout(timer);
    };
  }, [key, tick]);
  const current = state.key === key;
  return {
    data: current ? state.data : null,
    error: current ? state.error : null,
    loading: !current || (state.data === null && state.error === null),
    reload: () => setTick((t) => t + 1),
  };
}

/**
 * A form's submission (or any action): busy while it runs, and its error (the
 * API's detail) if it fails.
 */
export function useSubmit() {
  const [state, setState] = useState(
    /** @type {{ busy: boolean, error: Error | null }} */ ({ busy: false, error: null }),
  );
  /** @param {() => Promise<unknown>} action */
  const run = async (action) => {
    setState({ busy: true, error: null });
    try {
      await action();
      setState({ busy: false, error: null });
    } catch (err) {
      setState({ busy: false, error: /** @type {Error} */ (err) });
    }
  };
  return { ...state, run };
}

/** @param {{ error: Error | null }} props */
export function ErrorBox({ error }) {
  if (!error) return null;
  return html`<div class="error" role="alert">${error.message}</div>`;
}

export const Loading = () => html`<p class="muted" role="status">Loading…</p>`;

const TONES = {
  good: ['delivered', 'completed', 'succeeded', 'applied', 'enabled', 'received', 'answered', 'up'],
  bad: ['failed', 'refused', 'missed', 'disabled', 'no_answer', 'canceled', 'down'],
  busy: ['queued', 'sent', 'ringing', 'dialing', 'in_progress', 'pending', 'scheduled', 'probing'],
};

/** @param {{ value: string, label?: string }} props */
export function Badge({ value, label }) {
  const tone = Object.entries(TONES).find(([, words]) => words.includes(value))?.[0] ?? 'plain';
  return html`<span class="badge badge-${tone}">${label ?? value.replaceAll('_', ' ')}</span>`;
}

/** @param {{ at: string | null | undefined, precise?: boolean }} props */
export function Time({ at, precise = false }) {
  if (!at) return html`<span class="muted">—</span>`;
  return html`<time datetime=${at} title=${at}>${precise ? formatPrecise(at) : formatTime(at)}</time>`;
}

/**
 * One column of a DataTable.
 * @typedef {object} Column
 * @property {string} label its heading, and each cell's label where rows are cards
 * @property {any} [head] the heading as shown, when it is more than the label (an abbreviation)
 * @property {(item: any) => any} cell
 * @property {'title' | 'status' | 'text' | 'action'} [kind] title: what a card is headed with; status: shown
 *   beside it; text: long text, which wraps (plain cells keep to one line); action: a button, unlabelled on a card
 * @property {(item: any) => string | null | undefined} [full] the whole value of a cell that may be cut short
 *   (to two lines), shown on hover
 * @property {boolean} [rowHeader] the cell names its row (a <th scope="row">)
 */

/**
 * Items as a table that fits its width: where there is room, a table whose long
 * text wraps or is cut short with the whole of it on hover; where there is not
 * (a phone, a tablet), a card per item, its title and status on top and each
 * other cell under its column's label. The explicit roles keep it a table to assistive
 * technology whichever way it is drawn.
 * @param {{ label: string, columns: Column[], items: any[], rowProps?: (item: any) => Record<string, any>,
 *   caption?: any, className?: string }} props label: the table's accessible name
 */
export function DataTable({ label, columns, items, rowProps, caption, className }) {
  /** @param {Column} c */
  const kindClass = (c) => (c.kind ? `col-${c.kind}` : undefined);
  /** @param {Column} c @param {any} item */
  const content = (c, item) => {
    const value = c.cell(item);
    const full = c.full?.(item);
    return full ? html`<div class="clip" title=${full}>${value}</div>` : value;
  };
  // focusable, so a keyboard can scroll it should a table with longer values than usual still be too wide
  return html`<div class="table-wrap" role="region" aria-label=${label} tabindex="0">
    <table class=${className ? `list ${className}` : 'list'} role="table">
      ${caption ? html`<caption>${caption}</caption>` : null}
      <thead role="rowgroup">
        <tr role="row">
          ${columns.map((c) => html`<th scope="col" role="columnheader" class=${kindClass(c)}>${c.head ?? c.label}</th>`)}
        </tr>
      </thead>
      <tbody role="rowgroup">
        ${items.map(
          (item) => html`<tr role="row" ...${rowProps?.(item) ?? {}}>
            ${columns.map((c) =>
              c.rowHeader
                ? html`<th scope="row" role="rowheader" class=${kindClass(c)} data-label=${c.label}>${content(c, item)}</th>`
                : html`<td role="cell" class=${kindClass(c)} data-label=${c.label}>${content(c, item)}</td>`,
            )}
          </tr>`,
        )}
      </tbody>
    </table>
  </div>`;
}

/**
 * Newer/Older for a cursor-paged list whose cursor is `starting_after` in the
 * address. Older adds a history entry, so Newer is the browser's Back.
 * @param {{ search: string, hasMore: boolean, lastId: string | undefined }} props
 */
export function Pager({ search, hasMore, lastId }) {
  const q = new URLSearchParams(search);
  const paged = q.has('starting_after');
  const older = () => {
    if (!lastId) return;
    q.set('starting_after', lastId);
    navigate(`${location.pathname}?${q}`, { state: { paged: true } });
  };
  const newer = () => {
    if (history.state?.paged) return history.back();
    q.delete('starting_after');
    const rest = q.toString();
    navigate(location.pathname + (rest ? `?${rest}` : ''));
  };
  if (!paged && !hasMore) return null;
  return html`<nav class="pager" aria-label="Pages">
    <button type="button" onClick=${newer} disabled=${!paged}>← Newer</button>
    <button type="button" onClick=${older} disabled=${!hasMore}>Older →</button>
  </nav>`;
}

/** @param {{ title: string, secret: string, children?: any }} props */
export function SecretOnce({ title, secret, children }) {
  const [copied, setCopied] = useState(false);
  const copy = async () => {
    await navigator.clipboard.writeText(secret).then(
      () => setCopied(true),
      () => setCopied(false),
    );
  };
  return html`<div class="secret" role="status">
    <p><strong>${title}</strong> Copy it now: it is shown only this once.</p>
    <p><code class="secret-value" data-secret>${secret}</code></p>
    <button type="button" onClick=${copy}>${copied ? 'Copied' : 'Copy'}</button>
    ${children}
  </div>`;
}

/** Sets the page title and moves focus to the page's heading when the page changes. @param {string} title */
export function usePageTitle(title) {
  useEffect(() => {
    document.title = `${title} · Handset console`;
  }, [title]);
}

/** @param {{ items: [string, any][] }} props label/value pairs */
export function Facts({ items }) {
  return html`<dl class="facts">
    ${items.map(
      ([label, value]) => html`<div>
        <dt>${label}</dt>
        <dd>${value ?? html`<span class="muted">—</span>`}</dd>
      </div>`,
    )}
  </dl>`;
}
