// Sign in with an API key. The key is checked against the API before it is kept
// (in this tab's sessionStorage only); a refused key shows the API's own detail.

import { html } from 'htm/preact';
import { useState } from 'preact/hooks';
import { tryKey } from '../api.js';
import { ErrorBox, usePageTitle } from '../components.js';
import { signIn, takeNotice } from '../session.js';

export function SignInPage() {
  usePageTitle('Sign in');
  const [key, setKey] = useState('');
  const [error, setError] = useState(/** @type {Error | null} */ (null));
  const [busy, setBusy] = useState(false);
  const [notice] = useState(takeNotice);
  /** @param {Event} e */
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await tryKey(key.trim());
      const next = new URLSearchParams(location.search).get('next');
      signIn(key.trim(), next?.startsWith('/console/') ? next : '/console/messages');
    } catch (err) {
      setError(/** @type {Error} */ (err));
      setBusy(false);
    }
  };
  return html`<main id="main" class="sign-in">
    <h1 tabindex="-1">Handset console</h1>
    <p>
      Sign in with one of your account's API keys. It is kept in this browser tab only, and forgotten when the tab
      closes.
    </p>
    ${notice ? html`<p class="notice" role="status">${notice}</p>` : null}
    <form onSubmit=${submit}>
      <label for="api-key">API key</label>
      <input id="api-key" name="api-key" type="password" autocomplete="off" spellcheck="false" required
        placeholder="hsk_…" value=${key} onInput=${(/** @type {any} */ e) => setKey(e.currentTarget.value)} />
      <button type="submit" class="primary" disabled=${busy}>${busy ? 'Signing in…' : 'Sign in'}</button>
    </form>
    <${ErrorBox} error=${error} />
    <p class="muted">Running <code>npm start</code>? Use the API key it printed.</p>
  </main>`;
}
