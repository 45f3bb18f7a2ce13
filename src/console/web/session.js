// Who is signed in: the API key, kept only in this tab's sessionStorage (gone when
// the tab closes, never in a cookie, a URL or localStorage). Signing in or out
// reloads the page, so nothing one account's pages loaded outlives the switch.

const KEY = 'handset.console.apiKey';
const NOTICE = 'handset.console.notice';

/** @returns {string | null} */
export const apiKey = () => sessionStorage.getItem(KEY);

/** @param {string} key @param {string} next where to go, a console path */
export function signIn(key, next) {
  sessionStorage.setItem(KEY, key);
  location.replace(next);
}

/** @param {string} [notice] said on the sign-in page, e.g. why the key stopped working */
export function signOut(notice) {
  sessionStorage.removeItem(KEY);
  if (notice) sessionStorage.setItem(NOTICE, notice);
  location.replace('/console/sign-in');
}

/** The notice left by signOut, once. */
export function takeNotice() {
  const notice = sessionStorage.getItem(NOTICE);
  sessionStorage.removeItem(NOTICE);
  return notice;
}

/** A page restored from the back-forward cache after a sign-out or a switch of key is loaded again. */
export function guardRestoredPages() {
  const renderedWith = apiKey();
  addEventListener('pageshow', (e) => {
    if (e.persisted && apiKey() !== renderedWith) location.reload();
  });
}
