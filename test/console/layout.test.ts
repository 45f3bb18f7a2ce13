// The console's layout in a real browser (headless Chromium) at a laptop's width
// (1280 px) and a phone's (390 px), over an account seeded with fixed ids and
// times (support/seed.ts) and the page's clock fixed, so every run draws the
// same pixels: no list page scrolls sideways, every cell of every row lies in
// view, text cut short carries its whole value on hover, and each page looks as
// its committed baseline (test/console/baselines/*.png) within a small tolerance.
// Beside those, the rules of how the console writes time and styles its actions.
//
// Updating the baselines after an intended change of look:
//   HANDSET_CONSOLE_BASELINES=update HANDSET_BROWSER_TESTS=required npx vitest run test/console/layout.test.ts
// then look at the changed PNGs (git diff shows which) before committing them. On
// a mismatch the test saves what it saw and a diff under test-results/console/.

import type { Page } from 'playwright-core';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Platform } from '../../src/platform.js';
import { createTestDatabase, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';
import { differsFromBaseline } from './support/baseline.js';
import {
  browserRequired,
  findChromium,
  HOW_TO_INSTALL,
  launchBrowser,
  signIn,
  type TestBrowser,
  watchTest,
} from './support/browser.js';
import { NOW, type Seeded, seedAccount } from './support/seed.js';

// The page's own globals, for the functions below that Playwright runs inside it
// (the tests' TypeScript has no DOM library).
declare const document: any;
declare const getComputedStyle: (el: any) => any;
declare const history: { pushState(state: unknown, unused: string, url: string): void };
declare const dispatchEvent: (e: unknown) => void;
declare const PopStateEvent: new (type: string) => unknown;

/** The share of a screenshot's pixels that may differ from its baseline (anti-aliasing is already discounted). */
const MAX_DIFFERING = 0.0005;

/** A laptop's window and a phone's. */
const WIDTHS = [
  { width: 1280, height: 900 },
  { width: 390, height: 844 },
] as const;

const chromiumPath = findChromium();
if (!chromiumPath && !browserRequired) console.log(`console layout tests skipped: no Chromium; ${HOW_TO_INSTALL}`);

describe.skipIf(!chromiumPath && !browserRequired)('the console laid out at a laptop’s and a phone’s width', () => {
  let db: TestDatabase;
  let platform: Platform;
  let browser: TestBrowser;
  let page: Page;
  let base: string;
  let seeded: Seeded;
  /** Requests the page has asked for and not yet had answered. */
  let inFlight = 0;

  const consoleUrl = (p: string) => `${base}/console${p}`;

  beforeAll(async () => {
    db = await createTestDatabase();
    seeded = await seedAccount(db.pool);
    platform = await startTestPlatform({ databaseUrl: db.url, roles: ['api'] });
    base = platform.apiUrl!;
    browser = await launchBrowser();
    page = browser.page;
    page.on('request', () => inFlight++);
    page.on('requestfinished', () => inFlight--);
    page.on('requestfailed', () => inFlight--);
    await page.clock.setFixedTime(NOW);
    await signIn(page, consoleUrl('/sign-in'), seeded.key);
  });

  afterAll(async () => {
    await browser?.close();
    await platform?.stop();
    await db?.drop();
  });

  beforeEach((ctx) => {
    const pageErrors = watchTest(browser, ctx);
    return () => {
      expect(pageErrors()).toEqual([]);
    };
  });

  /**
   * Opens a console page as a link in it would (the page is not reloaded), and
   * waits until it has drawn what it loaded: its `ready` element is there and no
   * request has been in flight for a few looks in a row.
   */
  async function open(path: string, ready: string) {
    const target = `/console${path}`;
    if (new URL(page.url()).pathname === target) await page.goto(base + target);
    else
      await page.evaluate((to) => {
        history.pushState(null, '', to);
        dispatchEvent(new PopStateEvent('popstate'));
      }, target);
    await page.locator(ready).first().waitFor();
    for (let calm = 0; calm < 3; calm = inFlight === 0 ? calm + 1 : 0) await new Promise((r) => setTimeout(r, 50));
  }

  /** What scrolls sideways: the document, or any box in the page that has more to show than its width. */
  const sideways = () =>
    page.evaluate(() => {
      const found: string[] = [];
      const doc = document.documentElement;
      if (doc.scrollWidth > doc.clientWidth) found.push(`the page (${doc.scrollWidth} > ${doc.clientWidth} px)`);
      for (const el of document.querySelectorAll('main *') as any[]) {
        const { overflowX } = getComputedStyle(el);
        if ((overflowX === 'auto' || overflowX === 'scroll') && el.scrollWidth > el.clientWidth + 1)
          found.push(`${el.tagName.toLowerCase()}.${el.className} (${el.scrollWidth} > ${el.clientWidth} px)`);
      }
      return found;
    });

  /** The cells of a list that lie, even in part, outside the window or outside a box that clips them. */
  const cellsOutOfView = () =>
    page.evaluate(() => {
      const out: string[] = [];
      for (const cell of document.querySelectorAll('main table tbody td, main table tbody th') as any[]) {
        const r = cell.getBoundingClientRect();
        if (r.width === 0 && r.height === 0) continue;
        let [left, right] = [0, document.documentElement.clientWidth];
        for (let el = cell.parentElement; el && el !== document.body; el = el.parentElement) {
          if (getComputedStyle(el).overflowX === 'visible') continue;
          const box = el.getBoundingClientRect();
          [left, right] = [Math.max(left, box.left), Math.min(right, box.right)];
        }
        if (r.left < left - 1 || r.right > right + 1) {
          const row = cell.closest('tr')?.getAttribute('data-id') ?? '';
          out.push(
            `${row} "${cell.innerText.slice(0, 30)}" spans ${r.left | 0}–${r.right | 0}, view ${left | 0}–${right | 0}`,
          );
        }
      }
      return out;
    });

  /** Text the page cut short (an ellipsis or a clamp) whose hover title is not its whole value. */
  const clippedWithoutTitle = () =>
    page.evaluate(() => {
      const out: string[] = [];
      for (const el of document.querySelectorAll('main *') as any[]) {
        const style = getComputedStyle(el);
        const clips = style.textOverflow === 'ellipsis' || style.webkitLineClamp !== 'none';
        if (!clips) continue;
        const cut = el.scrollWidth > el.clientWidth + 1 || el.scrollHeight > el.clientHeight + 1;
        if (cut && el.title.trim() !== el.textContent?.trim())
          out.push(`"${el.textContent?.slice(0, 40)}…" has no whole title`);
      }
      return out;
    });

  /**
   * The page as a PNG. The header shows the first characters of the API key, new
   * on every run: they are written over with a fixed stand-in first.
   */
  const screenshot = async () => {
    await page.locator('header .account .muted').evaluate((el) => {
      el.textContent = 'hsk_seeded0…';
    });
    return page.screenshot({ fullPage: true, animations: 'disabled', caret: 'hide' });
  };

  const LIST_PAGES = [
    { name: 'messages', path: '/messages', ready: 'table.list tbody tr' },
    { name: 'calls', path: '/calls', ready: 'table.list tbody tr' },
    { name: 'events', path: '/events', ready: 'table.list tbody tr' },
    { name: 'webhooks', path: '/webhooks', ready: 'table.list tbody tr', open: 'Add an endpoint' },
    { name: 'opt-outs', path: '/opt-outs', ready: 'table.list tbody tr' },
  ];

  for (const size of WIDTHS) {
    describe(`at ${size.width} px`, () => {
      beforeAll(async () => {
        await page.setViewportSize({ width: size.width, height: size.height });
      });

      for (const p of LIST_PAGES) {
        it(`${p.name}: nothing scrolls sideways, every cell of every row is in view, and it looks as its baseline`, async () => {
          await open(p.path, p.ready);
          if (p.open) await page.getByText(p.open).click();
          expect(await page.locator('main table tbody tr').count()).toBeGreaterThan(2);
          expect(await sideways(), 'scrolls sideways').toEqual([]);
          expect(await cellsOutOfView(), 'cells out of view').toEqual([]);
          expect(await clippedWithoutTitle(), 'text cut short').toEqual([]);
          expect(await differsFromBaseline(`${p.name}-${size.width}`, await screenshot(), MAX_DIFFERING)).toBeNull();
        });
      }

      it("an endpoint's page (health, recover, attempts): nothing scrolls sideways, and it looks as its baseline", async () => {
        await open(`/webhooks/${seeded.busyEndpointId}`, 'table.list tbody tr');
        expect(await sideways(), 'scrolls sideways').toEqual([]);
        expect(await cellsOutOfView(), 'cells out of view').toEqual([]);
        expect(await clippedWithoutTitle(), 'text cut short').toEqual([]);
        expect(await differsFromBaseline(`endpoint-${size.width}`, await screenshot(), MAX_DIFFERING)).toBeNull();
      });

      it("an event's page (its deliveries and their attempts): nothing scrolls sideways, and it looks as its baseline", async () => {
        await open(`/events/${seeded.deliveredEventId}`, 'table.attempts tbody tr');
        expect(await sideways(), 'scrolls sideways').toEqual([]);
        expect(await cellsOutOfView(), 'cells out of view').toEqual([]);
        expect(await differsFromBaseline(`event-${size.width}`, await screenshot(), MAX_DIFFERING)).toBeNull();
      });
    });
  }

  describe('at 1280 px', () => {
    beforeAll(async () => {
      await page.setViewportSize({ width: 1280, height: 900 });
    });

    it('a message body cut short in the list carries the whole body on hover', async () => {
      await open('/messages', 'table.list tbody tr');
      const longest = seeded.messageIds[1]!; // 1,600 characters
      const body = (
        (await (await fetch(`${base}/v1/messages/${longest}`, auth(seeded.key))).json()) as { body: string }
      ).body;
      const titles = await page
        .locator(`tr[data-id="${longest}"] [title]`)
        .evaluateAll((els) => els.map((e) => e.getAttribute('title')));
      expect(titles).toContain(body);
    });

    it("the event page dates every moment it shows: the event's, and each attempt's across midnight", async () => {
      await open(`/events/${seeded.deliveredEventId}`, 'table.attempts tbody tr');
      expect(await page.locator('.facts time').first().innerText()).toMatch(/^Mar 13,? 23:59:41\.250$/);
      const started = await page.locator('table.attempts tbody time').allInnerTexts();
      expect(started.toSorted()).toEqual(
        ['Mar 13, 23:59:42.031', 'Mar 13, 23:59:58.412', 'Mar 14, 00:00:28.907'].toSorted(),
      );
    });

    it('the Recover picker shows and takes a 24-hour time, with nothing asking for AM or PM', async () => {
      const quiet = seeded.endpointIds[1]!;
      await open(`/webhooks/${quiet}`, 'h2#recover-h');
      const picker = page.getByLabel('Recover since');
      // an hour before now (15:30 UTC), in the reader's time zone (UTC here), on a 24-hour clock
      expect(await picker.inputValue()).toBe('2026-03-14 14:30');
      const cdp = await browser.context.newCDPSession(page);
      const { nodes } = (await cdp.send('Accessibility.getFullAXTree')) as {
        nodes: { name?: { value?: string }; role?: { value?: string } }[];
      };
      await cdp.detach();
      const ampm = nodes.filter((n) => /\b(AM|PM)\b/.test(String(n.name?.value ?? '')));
      expect(ampm.map((n) => `${n.role?.value} ${n.name?.value}`)).toEqual([]);

      await picker.fill('2026-03-14 09:05');
      await page.getByRole('button', { name: 'Recover', exact: true }).click();
      const row = page.locator('tr[data-recovery]').first();
      await row.waitFor();
      const asked = (await (
        await fetch(`${base}/v1/webhook_endpoints/${quiet}/recoveries`, auth(seeded.key))
      ).json()) as {
        data: { since: string }[];
      };
      expect(asked.data[0]?.since).toBe('2026-03-14T09:05:00.000Z');
      expect(await row.locator('td').nth(1).innerText()).toBe('Mar 14, 09:05:00');

      // a moment that is not one is refused on the page, before any request
      await picker.fill('2026-02-30 25:00');
      await page.getByRole('button', { name: 'Recover', exact: true }).click();
      expect(await page.getByRole('alert').innerText()).toContain('YYYY-MM-DD HH:MM');
    });

    it("on an endpoint's page Disable and Delete look like what they do, not like its primary action", async () => {
      await open(`/webhooks/${seeded.busyEndpointId}`, 'h2#health-h');
      const colours = await page.evaluate(() => {
        const root = getComputedStyle(document.documentElement);
        const probe = document.createElement('span');
        document.body.append(probe);
        const rgb = (v: string) => {
          probe.style.color = root.getPropertyValue(v);
          return getComputedStyle(probe).color;
        };
        const out = { accent: rgb('--accent'), bad: rgb('--bad'), busy: rgb('--busy') };
        probe.remove();
        return out;
      });
      const style = async (name: string) =>
        page.getByRole('button', { name, exact: true }).evaluate((b) => {
          const s = getComputedStyle(b);
          return { background: s.backgroundColor, border: s.borderTopColor, color: s.color };
        });
      const disable = await style('Disable');
      expect(disable.background).not.toBe(colours.accent);
      expect(disable.border).toBe(colours.busy);
      const del = await style('Delete…');
      expect(del.background).not.toBe(colours.accent);
      expect(del.border).toBe(colours.bad);
      await page.getByRole('button', { name: 'Delete…' }).click();
      expect((await style('Delete endpoint')).background).toBe(colours.bad);
      await page.getByRole('button', { name: 'Cancel' }).click();
      expect((await style('Send test event')).background).not.toBe(colours.accent);
    });

    it('the Add an endpoint form holds no empty block: each row of fields follows the one before', async () => {
      await open('/webhooks', 'table.list tbody tr');
      await page.getByText('Add an endpoint').click();
      // each field starts close below what is above it: the form's top, or the lowest field that ends above it
      const holes = await page.locator('details.compose form').evaluate((form) => {
        const top = form.getBoundingClientRect().top;
        const boxes = [...form.children].map((c) => ({
          name: c.textContent?.trim().slice(0, 20),
          r: c.getBoundingClientRect(),
        }));
        return boxes.flatMap(({ name, r }) => {
          const above = Math.max(top, ...boxes.filter((b) => b.r.bottom <= r.top + 1).map((b) => b.r.bottom));
          return r.top - above > 24 ? [`${name}: ${Math.round(r.top - above)} px below what is above it`] : [];
        });
      });
      expect(holes).toEqual([]);
    });
  });
});

const auth = (key: string) => ({ headers: { authorization: `Bearer ${key}` } });
