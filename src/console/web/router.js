// Pages by URL under /console (/console/messages/msg_…), with the browser's own
// history: links under /console change the page without a reload, Back and
// Forward work, and every page can be reloaded or shared by its address.

import { useEffect, useState } from 'preact/hooks';

export const BASE = '/console';

/** A console path as a link target. @param {string} path e.g. '/messages' */
export const href = (path) => BASE + path;

/**
 * @template T
 * @param {{ path: string, page: T }[]} routes paths like '/messages/:id'
 * @param {string} pathname
 * @returns {{ route: { path: string, page: T }, params: Record<string, string> } | null}
 */
export function match(routes, pathname) {
  const rel = pathname.startsWith(BASE) ? pathname.slice(BASE.length) || '/' : pathname;
  for (const route of routes) {
    /** @type {string[]} */
    const names = [];
    const pattern = route.path.replace(/:(\w+)/g, (_, name) => {
      names.push(name);
      return '([^/]+)';
    });
    const m = new RegExp(`^${pattern}/?$`).exec(rel);
    if (m) return { route, params: Object.fromEntries(names.map((n, i) => [n, decodeURIComponent(m[i + 1] ?? '')])) };
  }
  return null;
}

const CHANGED = 'handset:navigate';

/**
 * @param {string} to a path under /console, with its query
 * @param {{ replace?: boolean, state?: unknown }} [opts] state: kept with the history entry (paging uses it)
 */
export function navigate(to, opts = {}) {
  history[opts.replace ? 'replaceState' : 'pushState'](opts.state ?? null, '', to);
  dispatchEvent(new Event(CHANGED));
}

/** The current address; re-renders on every navigation. */
export function useLocation() {
  const read = () => ({ pathname: location.pathname, search: location.search });
  const [loc, setLoc] = useState(read);
  useEffect(() => {
    const changed = () => setLoc(read());
    addEventListener('popstate', changed);
    addEventListener(CHANGED, changed);
    return () => {
      removeEventListener('popstate', changed);
      removeEventListener(CHANGED, changed);
    };
  }, []);
  return loc;
}

/**
 * Plain left clicks on links to console pages navigate in place; anything else
 * (a new tab, a download) is the browser's.
 */
export function interceptLinks() {
  document.addEventListener('click', (e) => {
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    const a = e.target instanceof Element ? e.target.closest('a') : null;
    if (!a || a.target || a.hasAttribute('download') || a.origin !== location.origin || !a.pathname.startsWith(BASE))
      return;
    e.preventDefault();
    navigate(a.pathname + a.search);
  });
}
