// The console with two carriers, in a real browser (headless Chromium): the
// messages page shows each carrier's health (Telnyx marked down after refused
// connections), every message and number names its carrier, and a message sent
// from the console with a Twilio fallback while Telnyx refuses connections shows
// that it failed over, from where, why, and which carrier sent it.

import type { Page } from 'playwright-core';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createAccount, type ApiClient } from '../support/api.js';
import { startTwoCarriers, type TwoCarriers } from '../support/carriers.js';
import { createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import {
  browserRequired,
  expectCleanPages,
  findChromium,
  launchBrowser,
  signIn,
  type TestBrowser,
} from './support/browser.js';

const ON_TELNYX = '+13125550501';
const ON_TWILIO = '+13125550502';
const DELIVERED = '+15555550100';

const chromiumPath = findChromium();

describe.skipIf(!chromiumPath && !browserRequired)('the console with two carriers', () => {
  let db: TestDatabase;
  let c: TwoCarriers;
  let acme: ApiClient;
  let browser: TestBrowser;
  let page: Page;
  let base: string;

  beforeAll(async () => {
    db = await createTestDatabase();
    c = await startTwoCarriers({
      databaseUrl: db.url,
      env: { HANDSET_CARRIER_DOWN_AFTER: '1', HANDSET_CARRIER_RETRY_AFTER: '1h' },
    });
    base = c.platform.apiUrl!;
    acme = await createAccount(db.pool, base, 'Acme');
    expect((await acme.post('/v1/phone_numbers', { number: ON_TELNYX, carrier: 'telnyx' })).status).toBe(201);
    expect((await acme.post('/v1/phone_numbers', { number: ON_TWILIO, carrier: 'twilio' })).status).toBe(201);
    browser = await launchBrowser();
    page = browser.page;
  });
  afterAll(async () => {
    await browser?.close();
    await c?.close();
    await db?.drop();
  });
  beforeEach(
    expectCleanPages(
      () => browser,
      () => base,
    ),
  );

  it('shows each carrier up, and each number with its carrier in the compose form', async () => {
    await signIn(page, `${base}/console/sign-in`, acme.key);
    await page.locator('[data-carrier="telnyx"][data-status="up"]').waitFor();
    expect(await page.locator('.carrier-health [data-carrier="telnyx"]').innerText()).toMatch(
      /telnyx\s+up\s+messages and calls/,
    );
    expect(await page.locator('.carrier-health [data-carrier="twilio"]').innerText()).toMatch(
      /twilio\s+up\s+messages$/,
    );
    await page.getByText('Send a message').click();
    await page.locator('#msg-from option', { hasText: `${ON_TWILIO} (twilio)` }).waitFor({ state: 'attached' });
    expect(await page.locator('#msg-from option').allInnerTexts()).toEqual(
      expect.arrayContaining([`${ON_TELNYX} (telnyx)`, `${ON_TWILIO} (twilio)`]),
    );
  });

  it('a message sent with a Twilio fallback while Telnyx refuses connections: it says it failed over, from where and why, and Telnyx shows down', async () => {
    await c.telnyx.setDown('refuse');
    try {
      await page.getByLabel('From').selectOption(ON_TELNYX);
      // The fallback offers only numbers at another carrier.
      expect(await page.locator('#msg-fallback option').allInnerTexts()).toEqual(['None', `${ON_TWILIO} (twilio)`]);
      await page.getByLabel('Fallback').selectOption(ON_TWILIO);
      await page.getByLabel('To').fill(DELIVERED);
      await page.getByLabel('Body').fill('Failing over from the console');
      await page.getByRole('button', { name: 'Send' }).click();
      await page.waitForURL(/\/console\/messages\/msg_/);
      await page.locator('.status-line', { hasText: 'delivered' }).waitFor({ timeout: 20_000 });
      const facts = await page.locator('.facts').innerText();
      expect(facts).toMatch(/Carrier\s+twilio/);
      expect(facts).toMatch(/From\s+\+13125550502/);
      expect(facts).toMatch(
        new RegExp(
          `Failed over\\s+from \\${ON_TELNYX} \\(telnyx\\): telnyx did not take the message \\(no answer: ECONNREFUSED\\)`,
        ),
      );
      const timeline = await page.locator('.timeline').innerText();
      expect(timeline).toContain('Failed over from telnyx');
      expect(timeline).toContain('Accepted by twilio (sent)');
      expect(timeline).toContain('Carrier receipt: delivered (twilio)');
      // The list names the carrier that sent it; the dashboard shows Telnyx down (one refusal marks it here).
      await page.getByRole('link', { name: 'Messages' }).first().click();
      await page.getByRole('heading', { name: 'Messages', level: 1 }).waitFor();
      await eventually(async () =>
        (await page.locator('tbody tr').first().locator('[data-carrier]').innerText()).includes('twilio'),
      );
      expect(await page.locator('tbody tr').first().locator('[data-carrier]').innerText()).toBe('twilio (failed over)');
      await page.locator('.carrier-health [data-carrier="telnyx"][data-status="down"]').waitFor({ timeout: 10_000 });
      expect(await page.locator('.carrier-health [data-carrier="telnyx"]').innerText()).toContain('ECONNREFUSED');
    } finally {
      await c.telnyx.setDown('up');
    }
  });
});
