// A real headless Chromium for the console's tests: the system's (Debian's
// package), never a downloaded one, driven by playwright-core in a fresh
// profile. It records every request and every uncaught page error, so a test can
// prove the console stayed on its origin and threw nothing, and it can save a
// screenshot of each open page when a test fails.

import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { expect, type TestContext } from 'vitest';

/** Flags for a quiet, offline, sandbox-free headless run (CI runs as root, where the sandbox cannot start). */
export const CHROMIUM_FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** Where failure screenshots go (gitignored). */
export const ARTIFACTS_DIR = path.resolve('test-results/console');

/** HANDSET_CHROMIUM names the browser to use (and only it); otherwise Debian's and Ubuntu's places. */
const CANDIDATES = process.env['HANDSET_CHROMIUM']
  ? [process.env['HANDSET_CHROMIUM']]
  : ['/usr/bin/chromium', '/usr/bin/chromium-browser'];

export function findChromium(): string | null {
  return CANDIDATES.find((p) => existsSync(p)) ?? null;
}

/** CI sets HANDSET_BROWSER_TESTS=required: no browser is then a failure, not a skip. */
export const browserRequired = process.env['HANDSET_BROWSER_TESTS'] === 'required';

export const HOW_TO_INSTALL =
  'install Chromium (Debian/Ubuntu: sudo apt-get install -y chromium) or point HANDSET_CHROMIUM at one';

export interface TestBrowser {
  context: BrowserContext;
  page: Page;
  /** Uncaught exceptions and unhandled rejections in any page, as "url: message". */
  pageErrors: string[];
  /** Every URL any page requested. */
  requests: string[];
  screenshotAll(name: string): Promise<string[]>;
  close(): Promise<void>;
}

export async function launchBrowser(): Promise<TestBrowser> {
  const executablePath = findChromium();
  if (!executablePath) throw new Error(`no Chromium found (looked at ${CANDIDATES.join(', ')}): ${HOW_TO_INSTALL}`);
  const profile = await mkdtemp(path.join(tmpdir(), 'handset-chromium-'));
  // a persistent context is Playwright's way to give Chromium a --user-data-dir: a fresh one per run
  const context = await chromium.launchPersistentContext(profile, {
    executablePath,
    headless: true,
    args: CHROMIUM_FLAGS,
    viewport: { width: 1280, height: 900 },
    locale: 'en-US',
    timezoneId: 'UTC',
  });
  const pageErrors: string[] = [];
  const requests: string[] = [];
  const watch = (page: Page) => page.on('pageerror', (err) => pageErrors.push(`${page.url()}: ${err.message}`));
  context.pages().forEach(watch);
  context.on('page', watch);
  context.on('request', (req) => requests.push(req.url()));
  const page = context.pages()[0] ?? (await context.newPage());
  return {
    context,
    page,
    pageErrors,
    requests,
    async screenshotAll(name) {
      await mkdir(ARTIFACTS_DIR, { recursive: true });
      const safe = name.replace(/[^a-z0-9]+/gi, '-').slice(0, 80);
      const saved: string[] = [];
      for (const [i, p] of context.pages().entries()) {
        const file = path.join(ARTIFACTS_DIR, `${safe}-${i}.png`);
        await p.screenshot({ path: file, fullPage: true }).then(
          () => saved.push(file),
          () => undefined,
        );
      }
      return saved;
    },
    async close() {
      await context.close();
      await rm(profile, { recursive: true, force: true });
    },
  };
}

/**
 * For a beforeEach: saves a screenshot of every open page if the test fails, and
 * gives the page errors thrown since, for the test's end to hold to none.
 */
export function watchTest(browser: TestBrowser, { task, onTestFailed }: TestContext): () => string[] {
  const errorsBefore = browser.pageErrors.length;
  onTestFailed(async () => {
    const saved = await browser.screenshotAll(task.name);
    console.log(`screenshots of "${task.name}": ${saved.join(', ')}`);
  });
  return () => browser.pageErrors.slice(errorsBefore);
}

/** Signs in at the console's own page with `key` and waits for the Messages page it opens on. */
export async function signIn(page: Page, consoleSignInUrl: string, key: string): Promise<void> {
  await page.goto(consoleSignInUrl);
  await page.getByLabel('API key').fill(key);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Messages', level: 1 }).waitFor();
}

/**
 * For a beforeEach: after each test, no page threw and nothing was requested from
 * another origin than `base()` (the console is same-origin only).
 */
export function expectCleanPages(browser: () => TestBrowser, base: () => string) {
  return () => {
    const errorsBefore = browser().pageErrors.length;
    return () => {
      expect(browser().pageErrors.slice(errorsBefore)).toEqual([]);
      expect(browser().requests.filter((u) => new URL(u).origin !== new URL(base()).origin)).toEqual([]);
    };
  };
}
