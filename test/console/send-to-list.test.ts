// Sending to a list from the console, in a real browser (headless Chromium): a
// person uploads a CSV of recipients in the send form, sends one body to all of
// them through POST /v1/messages/batch, sees how many were created and each
// refused row with the API's reason, and finds exactly those messages in the list.

import type { Page } from 'playwright-core';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Platform } from '../../src/platform.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { createAccount, type ApiClient } from '../support/api.js';
import { count, createTestDatabase, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';
import {
  browserRequired,
  expectCleanPages,
  findChromium,
  launchBrowser,
  signIn,
  type TestBrowser,
} from './support/browser.js';

const ACME_NUMBER = '+13125550701';

describe.skipIf(!findChromium() && !browserRequired)('sending to a CSV list from the console', () => {
  let db: TestDatabase;
  let sim: Simulator;
  let platform: Platform;
  let acme: ApiClient;
  let browser: TestBrowser;
  let page: Page;
  let base: string;

  beforeAll(async () => {
    db = await createTestDatabase();
    sim = await startSimulator({ webhookUrl: null, timeScale: 0.01, seed: 'send-to-list' });
    // No worker: the messages stay queued, to be counted as the batch left them.
    platform = await startTestPlatform({ databaseUrl: db.url, roles: ['api'], env: sim.carrierEnv() });
    base = platform.apiUrl!;
    acme = await createAccount(db.pool, base, 'Acme');
    expect((await acme.post('/v1/phone_numbers', { number: ACME_NUMBER })).status).toBe(201);
    expect((await acme.post('/v1/opt_outs', { number: ACME_NUMBER, recipient: '+15555550704' })).status).toBe(201);
    browser = await launchBrowser();
    page = browser.page;
  });
  afterAll(async () => {
    await browser?.close();
    await platform?.stop();
    await sim?.close();
    await db?.drop();
  });
  beforeEach(
    expectCleanPages(
      () => browser,
      () => base,
    ),
  );

  it('uploads a CSV, sends to every valid row in one batch, names each refused row, and lists the messages', async () => {
    await signIn(page, `${base}/console/sign-in`, acme.key);
    await page.getByText('Send a message').click();
    await page.locator('#msg-from option', { hasText: ACME_NUMBER }).waitFor({ state: 'attached' });

    const csv = [
      'name,phone',
      'Ada,+1 (555) 555-0701',
      '"Lovelace, Ada",+15555550702',
      'Nobody,',
      'Grace,+1312',
      'Opted out,+15555550704',
      'Alan,+15555550705',
    ].join('\r\n');
    await page.getByLabel('Recipients (CSV)').setInputFiles({
      name: 'customers.csv',
      mimeType: 'text/csv',
      buffer: Buffer.from(csv),
    });
    await page.getByText('5 recipients in customers.csv').waitFor();
    expect(await page.getByLabel('To', { exact: true }).count()).toBe(0);
    await page.getByLabel('Body').fill('Our spring sale starts today');
    const batches: string[] = [];
    page.on('request', (r) => {
      if (r.method() === 'POST' && new URL(r.url()).pathname.startsWith('/v1/messages')) batches.push(r.url());
    });
    await page.getByRole('button', { name: 'Send to 5' }).click();

    await page.locator('.list-result').waitFor();
    expect(await page.locator('.list-result p').innerText()).toBe('3 messages created, 2 refused:');
    expect(await page.locator('.list-result li').allInnerTexts()).toEqual([
      expect.stringMatching(/^Row 5 \(\+1312\): to: .+/),
      'Row 6 (+15555550704): +15555550704 opted out of messages from +13125550701; they can opt back in by texting START to it',
    ]);
    expect(batches.map((u) => new URL(u).pathname)).toEqual(['/v1/messages/batch']);

    const { rows } = await db.pool.query<{ to_number: string; body: string; status: string }>(
      'SELECT to_number, body, status FROM messages WHERE account_id = $1 ORDER BY to_number',
      [acme.accountId],
    );
    expect(rows).toEqual(
      ['+15555550701', '+15555550702', '+15555550705'].map((to) => ({
        to_number: to,
        body: 'Our spring sale starts today',
        status: 'queued',
      })),
    );
    // The list below the form shows them without a reload.
    await expect
      .poll(
        async () => (await page.locator('tbody tr').allInnerTexts()).filter((t) => t.includes('spring sale')).length,
      )
      .toBe(3);
    expect(await count(db.pool, 'SELECT * FROM messages')).toBe(3);
  });
});
