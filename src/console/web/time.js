// How the console writes times and durations: the reader's local time on a
// 24-hour clock, always with its day (a moment's neighbours may fall on another
// one) and its year when that is not this year, to the second (to the millisecond
// on timelines), with the exact ISO instant on hover; and how a moment typed into
// a field (YYYY-MM-DD HH:MM, the same clock) becomes the API's ISO-8601.

/**
 * A moment's format, this year's and another year's (which names the year).
 * @param {Intl.DateTimeFormatOptions} extra
 */
const momentFormats = (extra) =>
  /** @type {Intl.DateTimeFormatOptions[]} */ ([{}, { year: 'numeric' }]).map(
    (year) =>
      new Intl.DateTimeFormat(undefined, {
        ...year,
        month: 'short',
        day: 'numeric',
        hour: '2-digit',
        minute: '2-digit',
        second: '2-digit',
        hourCycle: 'h23',
        ...extra,
      }),
  );
const [thisYear, otherYear] = momentFormats({});
const [thisYearPrecise, otherYearPrecise] = momentFormats({ fractionalSecondDigits: 3 });
const day = new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric', timeZone: 'UTC' });
const hour = new Intl.DateTimeFormat(undefined, {
  hour: '2-digit',
  minute: '2-digit',
  hourCycle: 'h23',
  timeZone: 'UTC',
});
const month = new Intl.DateTimeFormat(undefined, { month: 'short', year: 'numeric', timeZone: 'UTC' });

/** @param {Date} at */
const isThisYear = (at) => at.getFullYear() === new Date().getFullYear();

/** @param {string} iso */
export function formatTime(iso) {
  const at = new Date(iso);
  return (isThisYear(at) ? thisYear : otherYear).format(at);
}

/** @param {string} iso */
export function formatPrecise(iso) {
  const at = new Date(iso);
  return (isThisYear(at) ? thisYearPrecise : otherYearPrecise).format(at);
}

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

/** How a moment is typed: the reader's local time, to the minute, on a 24-hour clock. */
export const MOMENT_FORMAT = 'YYYY-MM-DD HH:MM';

const pad = (/** @type {number} */ n) => String(n).padStart(2, '0');

/** A moment as it is typed (MOMENT_FORMAT). @param {Date} at */
export const toMomentInput = (at) =>
  `${at.getFullYear()}-${pad(at.getMonth() + 1)}-${pad(at.getDate())} ${pad(at.getHours())}:${pad(at.getMinutes())}`;

/**
 * A typed moment (MOMENT_FORMAT, in the reader's time zone; a T may stand for the
 * space) as the API's ISO-8601, or null when it is not a moment that exists.
 * @param {string} typed
 */
export function fromMomentInput(typed) {
  const m = /^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2})$/.exec(typed.trim());
  if (!m) return null;
  const [year, monthNo, date, hours, minutes] = m.slice(1).map(Number);
  const at = new Date(year ?? 0, (monthNo ?? 0) - 1, date, hours, minutes);
  // new Date rolls 30 February into March and 25:00 into the next day: such a moment was never typed
  return toMomentInput(at) === `${m[1]}-${m[2]}-${m[3]} ${m[4]}:${m[5]}` ? at.toISOString() : null;
}

/** The reader's time zone, as the browser names it (e.g. Europe/Paris). */
export const timeZone = () => Intl.DateTimeFormat().resolvedOptions().timeZone;
