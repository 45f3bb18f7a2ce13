// The Handset console: a client of the public /v1 API, in Preact and htm as plain
// ES modules. This module is the shell: which page each address shows, the
// navigation, signing out, and focus moving to a new page's heading. A page is a
// module under pages/; adding one (recordings) is one line in ROUTES.

import { html } from 'htm/preact';
import { render } from 'preact';
import { useEffect, useRef } from 'preact/hooks';
import { usePageTitle } from './components.js';
import { CallList, CallPage } from './pages/calls.js';
import { EndpointList, EndpointPage } from './pages/endpoints.js';
import { EventList, EventPage } from './pages/events.js';
import { MessageList, MessagePage } from './pages/messages.js';
import { OptOutList } from './pages/optouts.js';
import { SignInPage } from './pages/signin.js';
import { UsagePage } from './pages/usage.js';
import { href, interceptLinks, match, navigate, useLocation } from './router.js';
import { apiKey, guardRestoredPages, signOut } from './session.js';

/** Every page; `nav` puts it in the navigation bar. */
const ROUTES = [
  { path: '/messages', nav: 'Messages', page: MessageList },
  { path: '/messages/:id', nav: null, page: MessagePage },
  { path: '/calls', nav: 'Calls', page: CallList },
  { path: '/calls/:id', nav: null, page: CallPage },
  { path: '/events', nav: 'Events', page: EventList },
  { path: '/events/:id', nav: null, page: EventPage },
  { path: '/webhooks', nav: 'Webhooks', page: EndpointList },
  { path: '/webhooks/:id', nav: null, page: EndpointPage },
  { path: '/opt-outs', nav: 'Opt-outs', page: OptOutList },
  { path: '/usage', nav: 'Usage', page: UsagePage },
];

function NotFound() {
  usePageTitle('Not found');
  return html`<main id="main">
    <h1 tabindex="-1">No such page</h1>
    <p><a href=${href('/messages')}>Go to your messages</a></p>
  </main>`;
}

/** @param {{ current: string }} props the first segment of the current path */
function Header({ current }) {
  const key = apiKey() ?? '';
  return html`<header class="top">
    <a class="skip" href="#main">Skip to content</a>
    <a class="brand" href=${href('/messages')}>Handset</a>
    <nav aria-label="Console">
      <ul>
        ${ROUTES.filter((r) => r.nav).map(
          (r) =>
            html`<li><a href=${href(r.path)} aria-current=${current === r.path ? 'page' : undefined}>${r.nav}</a></li>`,
        )}
      </ul>
    </nav>
    <div class="account">
      <span class="muted" title="The API key this tab is signed in with">${key.slice(0, 12)}…</span>
      <button type="button" onClick=${() => signOut()}>Sign out</button>
    </div>
  </header>`;
}

function App() {
  const { pathname, search } = useLocation();
  const signedIn = apiKey() !== null;
  const onSignIn = pathname === '/console/sign-in';
  useEffect(() => {
    if (!signedIn && !onSignIn)
      navigate(`/console/sign-in?next=${encodeURIComponent(pathname + search)}`, { replace: true });
    else if (signedIn && (onSignIn || pathname === '/console' || pathname === '/console/'))
      navigate(href('/messages'), { replace: true });
  }, [signedIn, onSignIn, pathname]);
  // a new page (not the first): its heading takes the focus, so keyboard and screen-reader users start there
  const first = useRef(true);
  useEffect(() => {
    if (first.current) {
      first.current = false;
      return;
    }
    /** @type {HTMLElement | null} */ (document.querySelector('main h1'))?.focus({ preventScroll: true });
    window.scrollTo(0, 0);
  }, [pathname]);
  if (!signedIn) return onSignIn ? html`<${SignInPage} />` : null;
  const found = match(ROUTES, pathname);
  const Page = found?.route.page ?? NotFound;
  return html`<${Header} current=${found ? `/${found.route.path.split('/')[1]}` : ''} />
    <${Page} key=${pathname} params=${found?.params ?? {}} search=${search} />`;
}

guardRestoredPages();
interceptLinks();
const root = document.getElementById('app');
if (root) {
  root.textContent = '';
  render(html`<${App} />`, root);
}
