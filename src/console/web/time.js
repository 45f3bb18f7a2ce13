// How the console writes times and durations: the reader's local time, to the
// second (to the millisecond on timelines), with the exact ISO instant on hover;
// and how a moment typed into a datetime-local field becomes the API's ISO-8601.

const short = new Intl.DateTimeFormat(undefined, {
  month: 'short',
  day: 'numeric',
  hour: '2-digit',
  minute: '2-digit',
  second: '2-digit',
  hourCycle: 'h23',
});
const precise = new Intl.DateTimeFormat(undefined, {
  hour: '2-digit',
  minute: '2-digit',
  second: '2-digit',
  fractionalSecondDigits: 3,
  hourCycle: 'h23',
});
const day = new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric', timeZone: 'UTC' });
const hour = new Intl.DateTimeFormat(undefined, {
  hour: '2-digit',
  minute: '2-digit',
  hourCycle: 'h23',
  timeZone: 'UTC',
});
const month = new Intl.DateTimeFormat(undefined, { month: 'short', year: 'numeric', timeZone: 'UTC' });

/** @param {string} iso */
export const formatTime = (iso) => short.format(new Date(iso));
/** @param {string} iso */
export const formatPrecise = (iso) => precise.format(new Date(iso));

/** A UTC bucket's label, as wide as its interval. @param {Date} start @param {string} interval */
export function formatBucket(start, interval) {
  if (interval === 'hour') return `${day.format(start)} ${hour.format(start)} UTC`;
  if (interval === 'month') return month.format(start);
  return day.format(start);
}

/** @param {number} ms */
export function formatDuration(ms) {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  const s = Math.round(ms / 1000);
  return `${Math.floor(s / 60)} min ${s % 60} s`;
}

/** A moment as a datetime-local field shows it: the reader's local time, to the minute. @param {Date} at */
export function toLocalInput(at) {
  const pad = (/** @type {number} */ n) => String(n).padStart(2, '0');
  return `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())}T${pad(at.getHours())}:${pad(at.getMinutes())}`;
}

/** What a datetime-local field holds (the reader's local time) as the API's ISO-8601. @param {string} local */
export const fromLocalInput = (local) => new Date(local).toISOString();
