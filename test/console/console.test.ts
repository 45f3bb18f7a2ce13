// The web console in a real browser (headless Chromium), against Handset's roles
// running in this process with the simulator as the carrier: a person signs in,
// sends an SMS and watches it reach delivered, sees the carrier's duplicates and
// contradiction refused, places a sequential-ring call and sees its legs drawn,
// redelivers an event, creates and rotates an endpoint, reads its health, recovers
// what an endpoint missed and sends it a test event, reads the usage chart, pages
// through messages, uses a phone-sized screen, and switches accounts without seeing anything of the first. Every test also checks that no
// page threw and that nothing was requested from another origin.

import { mkdir } from 'node:fs/promises';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Platform } from '../../src/platform.js';
import { startSimulator, type Simulator } from '../../src/sim/simulator.js';
import { createAccount, type ApiClient } from '../support/api.js';
import { count, createTestDatabase, eventually, type TestDatabase } from '../support/db.js';
import { startTestPlatform } from '../support/platform.js';
import { startReceiver, type Receiver } from '../support/receiver.js';
import {
  browserRequired,
  findChromium,
  HOW_TO_INSTALL,
  launchBrowser,
  signIn as signInAt,
  type TestBrowser,
  watchTest,
} from './support/browser.js';

const ALICE_NUMBER = '+13125550401';
const BOB_NUMBER = '+13125550402';
const DELIVERED = '+15555550100'; // the simulator's persona: SMS delivered
/** A ring plan the simulator plays quickly: no answer (the 5 s timeout), busy after 0.5 s, answers after 0.5 s, talks 1 s. */
const RING = ['+15555550410', '+15555550411', '+15555550412'];
/** HANDSET_CONSOLE_DOCS=1 also saves the screenshots docs/console.md shows. */
const DOCS = process.env['HANDSET_CONSOLE_DOCS'] === '1';

const chromiumPath = findChromium();
if (!chromiumPath && !browserRequired) console.log(`console browser tests skipped: no Chromium; ${HOW_TO_INSTALL}`);

describe.skipIf(!chromiumPath && !browserRequired)('the web console in a real browser', () => {
  let db: TestDatabase;
  let sim: Simulator;
  let platform: Platform;
  let alice: ApiClient;
  let bob: ApiClient;
  let receiver: Receiver;
  let browser: TestBrowser;
  let page: Page;
  let base: string;
  /** Alice's first message, sent through the console. */
  let firstMessageId: string;

  const consoleUrl = (p: string) => `${base}/console${p}`;
  const until = <T>(fn: () => Promise<T | null | undefined | false>, ms = 20_000) => eventually(fn, ms, 100);
  const text = (selector: string) => page.locator(selector).innerText();
  const carrierIdle = () =>
    until(async () => (await count(db.pool, 'SELECT * FROM carrier_events WHERE processed_at IS NULL')) === 0);

  beforeAll(async () => {
    db = await createTestDatabase();
    sim = await startSimulator({ webhookUrl: null, seed: 'console' });
    sim.setPersona(RING[0]!, { call: { hangupCause: 'timeout' } });
    sim.setPersona(RING[1]!, { call: { hangupCause: 'user_busy', hangupAfterMs: 500 } });
    sim.setPersona(RING[2]!, { call: { answerAfterMs: 500, talkMs: 1000 } });
    platform = await startTestPlatform({
      databaseUrl: db.url,
      roles: ['ingest', 'api', 'worker'],
      env: { ...sim.carrierEnv(), HANDSET_DELIVERY_RETRY_SCHEDULE: '200ms,200ms' },
    });
    sim.setWebhookUrl(`${platform.ingestUrl}/webhooks/telnyx`);
    base = platform.apiUrl!;
    alice = await createAccount(db.pool, base, 'Alice');
    bob = await createAccount(db.pool, base, 'Bob');
    expect((await alice.post('/v1/phone_numbers', { number: ALICE_NUMBER })).status).toBe(201);
    expect((await bob.post('/v1/phone_numbers', { number: BOB_NUMBER })).status).toBe(201);
    receiver = await startReceiver();
    const ep = await alice.post('/v1/webhook_endpoints', { url: receiver.url, description: 'Alice receiver' });
    receiver.secrets = [ep.json.secret];
    browser = await launchBrowser();
    page = browser.page;
  });

  afterAll(async () => {
    await browser?.close();
    await platform?.stop();
    await sim?.close();
    await receiver?.close();
    await db?.drop();
  });

  beforeEach((ctx) => {
    const pageErrors = watchTest(browser, ctx);
    return () => {
      // every test: nothing thrown in a page, nothing fetched from another origin
      expect(pageErrors()).toEqual([]);
      expect(browser.requests.filter((u) => new URL(u).origin !== new URL(base).origin)).toEqual([]);
    };
  });

  const signIn = (key: string) => signInAt(page, consoleUrl('/sign-in'), key);

  async function docsShot(name: string, selector: string) {
    if (!DOCS) return;
    await mkdir('docs', { recursive: true });
    await page.setViewportSize({ width: 1000, height: 900 });
    await page.locator(selector).screenshot({ path: `docs/${name}.png` });
    await page.setViewportSize({ width: 1280, height: 900 });
  }

  it("/ leads to the sign-in page; a wrong key shows the API's problem detail; the right one, typed and sent with Enter, opens the messages", async () => {
    await page.goto(base + '/');
    await page.waitForURL(/\/console\/sign-in\?next=/);
    await page.getByLabel('API key').fill('hsk_wrong');
    await page.getByRole('button', { name: 'Sign in' }).click();
    expect(await page.getByRole('alert').innerText()).toBe('Invalid or revoked API key');
    // keyboard only: focus the field, type, Enter
    await page.getByLabel('API key').focus();
    await page.keyboard.press('ControlOrMeta+a');
    await page.keyboard.type(alice.key);
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { name: 'Messages', level: 1 }).waitFor();
    expect(new URL(page.url()).pathname).toBe('/console/messages');
    // the key lives in this tab's sessionStorage only: not in the address, not in localStorage or a cookie
    expect(page.url()).not.toContain(alice.key);
    expect(await page.evaluate<string>('Object.values(localStorage).join()')).not.toContain(alice.key);
    expect(await browser.context.cookies()).toEqual([]);
    expect(await page.evaluate<string[]>('Object.values(sessionStorage)')).toContain(alice.key);
  });

  it("an SMS sent from the console reaches delivered on its timeline, with what was billed and its events' deliveries", async () => {
    await page.getByText('Send a message').click();
    await page.locator('#msg-from option', { hasText: ALICE_NUMBER }).waitFor({ state: 'attached' });
    expect(await page.getByLabel('From').inputValue()).toBe(ALICE_NUMBER);
    await page.getByLabel('To').fill(DELIVERED);
    await page.getByLabel('Body').fill('Hello from the console');
    await page.getByRole('button', { name: 'Send' }).click();
    await page.waitForURL(/\/console\/messages\/msg_/);
    firstMessageId = decodeURIComponent(new URL(page.url()).pathname.split('/').pop()!);

    const delivered = page.locator('li[data-source=carrier][data-effect=applied]', {
      hasText: 'Carrier receipt: delivered',
    });
    await delivered.waitFor({ timeout: 20_000 });
    // The page reads the message and its history in two requests, so one look can
    // show the receipt applied and the status from just before it; the next shows both.
    await page.locator('.status-line', { hasText: 'delivered' }).waitFor({ timeout: 20_000 });
    expect(await text('.status-line')).toContain('delivered');
    expect((await alice.get(`/v1/messages/${firstMessageId}`)).json.status).toBe('delivered');
    // created first, then the carrier's word, in the API's order
    const sources = await page
      .locator('li[data-source]')
      .evaluateAll((els) => els.map((e) => e.getAttribute('data-source')));
    expect(sources[0]).toBe('api');
    expect(sources).toContain('dispatch');
    expect(await text('li.tl-billing')).toContain('Billed 1 × sms segment outbound');
    // both events, each delivered to Alice's receiver
    await until(async () => (await page.locator('li.tl-event .delivery-line', { hasText: 'succeeded' }).count()) === 2);
    const events = await page.locator('li.tl-event code').allInnerTexts();
    expect(events).toEqual(['message.sent', 'message.delivered']);
    await docsShot('console-message-timeline', 'main');
  });

  it('duplicates, re-sends under new ids and a contradiction from the carrier appear as refused receipts, each with its reason', async () => {
    sim.setBehaviour({ duplicateRate: 1, resendNewIdRate: 1, contradictionRate: 1 });
    let id: string;
    try {
      const res = await alice.post('/v1/messages', { from: ALICE_NUMBER, to: DELIVERED, body: 'a noisy carrier' });
      id = res.json.id;
      await until(async () => (await alice.get(`/v1/messages/${id}`)).json.status === 'delivered');
      await sim.idle();
      await carrierIdle();
    } finally {
      sim.setBehaviour({ duplicateRate: 0, resendNewIdRate: 0, contradictionRate: 0 });
    }
    await page.goto(consoleUrl(`/messages/${id}`));
    await page.locator('ol.timeline li').first().waitFor();
    const history = (await alice.get(`/v1/messages/${id}/status_history`)).json.data as {
      effect: string;
      note: string | null;
      carrier_status: string;
    }[];
    const refused = history.filter((h) => h.effect === 'refused');
    expect(refused.map((h) => h.carrier_status)).toEqual(expect.arrayContaining(['delivered', 'delivery_failed']));
    const shown = page.locator('li[data-effect=refused]');
    expect(await shown.count()).toBe(refused.length);
    for (const [i, h] of refused.entries()) {
      const item = await shown.nth(i).innerText();
      expect(item).toContain('Refused');
      expect(item).toContain(h.note!);
      expect(item).toContain(`Carrier receipt: ${h.carrier_status}`);
    }
    expect(await page.locator('li[data-effect=applied][data-source=carrier]').count()).toBe(1);
    // one delivered event, however noisy the carrier
    expect(await page.locator('li.tl-event code', { hasText: 'message.delivered' }).count()).toBe(1);
  });

  it('a sequential-ring call placed from the console draws its three legs on one time axis, with their hangup causes', async () => {
    await page.goto(consoleUrl('/calls'));
    await page.getByText('Place a call').click();
    await page.getByLabel('Ring, in order').fill(RING.join(', '));
    await page.getByLabel('Ring timeout (s)').fill('5');
    await page.getByRole('button', { name: 'Place call' }).click();
    await page.waitForURL(/\/console\/calls\/call_/);
    await page.locator('.status-line', { hasText: 'completed' }).waitFor({ timeout: 30_000 });

    const legs = page.locator('svg.ring-timeline g.leg');
    expect(await legs.count()).toBe(3);
    expect(await legs.evaluateAll((els) => els.map((e) => e.getAttribute('data-status')))).toEqual([
      'no_answer',
      'no_answer',
      'completed',
    ]);
    const labels = await page.locator('svg.ring-timeline .leg-status').allTextContents();
    expect(labels).toEqual(['no answer · timeout', 'no answer · user_busy', 'completed · normal_clearing']);
    // one shared axis: each leg's ringing starts where the previous one ended, and only the last was answered
    const spans = await legs.evaluateAll((els) =>
      els.map((g) => {
        const rings = g.querySelector('rect[data-kind=ringing]')!;
        const end = g.querySelector('line.leg-end')!;
        return {
          ringX: Number(rings.getAttribute('x')),
          endX: Number(end.getAttribute('x1')),
          answered: !!g.querySelector('rect[data-kind=answered]'),
        };
      }),
    );
    expect(spans.map((s) => s.answered)).toEqual([false, false, true]);
    expect(spans[1]!.ringX).toBeGreaterThanOrEqual(spans[0]!.endX);
    expect(spans[2]!.ringX).toBeGreaterThanOrEqual(spans[1]!.endX);
    // the first leg rang for the whole 5 s timeout: the longest ringing bar
    const ringWidths = await legs.evaluateAll((els) =>
      els.map((g) => Number(g.querySelector('rect[data-kind=ringing]')!.getAttribute('width'))),
    );
    expect(ringWidths[0]).toBeGreaterThan(Math.max(ringWidths[1]!, ringWidths[2]!));
    expect(await page.locator('table.legs tbody tr').count()).toBe(3);
    await until(async () =>
      (await page.locator('section', { hasText: 'Billing' }).innerText()).includes('Billed 1 × call minute'),
    );
    await docsShot('console-ring-timeline', 'main');
  });

  it("an event's page lists every attempt, and Redeliver adds a new one to the same endpoint with the same event id", async () => {
    const ev = (await alice.get(`/v1/events?subject_id=${firstMessageId}&type=message.sent`)).json.data[0];
    await page.goto(consoleUrl('/messages/' + firstMessageId));
    await page.getByRole('link', { name: 'message.sent' }).click();
    await page.waitForURL(new RegExp(`/console/events/${ev.id}$`));
    const attempts = page.locator('tr[data-attempt]');
    await attempts.first().waitFor();
    const before = await attempts.count();
    const receivedBefore = receiver.received.filter((r) => r.headers['webhook-id'] === ev.id).length;

    await page.getByRole('button', { name: 'Redeliver' }).click();
    expect(await page.getByRole('status').filter({ hasText: 'Redelivery queued' }).innerText()).toBe(
      'Redelivery queued to 1 endpoint.',
    );
    await until(async () => (await attempts.count()) === before + 1);
    expect(await attempts.last().getAttribute('data-trigger')).toBe('redeliver');
    expect(await attempts.last().locator('td').nth(3).innerText()).toBe('200');
    expect(receiver.received.filter((r) => r.headers['webhook-id'] === ev.id)).toHaveLength(receivedBefore + 1);
  });

  it('a new endpoint shows its secret once; rotating shows a new one, and both really sign; disable and enable work', async () => {
    const second = await startReceiver();
    try {
      await page.goto(consoleUrl('/webhooks'));
      await page.getByText('Add an endpoint').click();
      await page.getByLabel('URL').fill(second.url);
      await page.getByLabel('Description (optional)').fill('made in the console');
      await page.getByRole('checkbox', { name: 'message.delivered' }).check();
      await page.getByRole('button', { name: 'Add endpoint' }).click();
      const first = await page.locator('[data-secret]').innerText();
      expect(first).toMatch(/^whsec_/);
      const listed = (await alice.get('/v1/webhook_endpoints')).json.data.find(
        (e: { url: string }) => e.url === second.url,
      );
      expect(listed).toMatchObject({
        event_types: ['message.delivered'],
        description: 'made in the console',
        enabled: true,
      });
      await page.locator(`tr[data-id="${listed.id}"]`).waitFor();

      await page.getByRole('link', { name: 'Open the endpoint' }).click();
      await page.waitForURL(new RegExp(`/console/webhooks/${listed.id}$`));
      await page.getByRole('heading', { name: 'Health' }).waitFor();
      expect(await page.locator('[data-secret]').count()).toBe(0); // shown once: not on the endpoint's page
      await page.getByRole('button', { name: 'Rotate secret…' }).click();
      await page.getByRole('button', { name: 'Rotate now' }).click();
      const rotated = await page.locator('[data-secret]').innerText();
      expect(rotated).toMatch(/^whsec_/);
      expect(rotated).not.toBe(first);

      // the console showed the real secrets: a delivery now verifies with each of them on its own
      second.secrets = [first, rotated];
      await alice.post('/v1/messages', { from: ALICE_NUMBER, to: DELIVERED, body: 'signed twice' });
      const got = await until(async () => second.received.find((r) => JSON.parse(r.body).type === 'message.delivered'));
      expect(got.verifiedWith).toEqual([true, true]);

      await page.getByRole('button', { name: 'Disable' }).click();
      await page.locator('.status-line', { hasText: 'disabled' }).waitFor();
      expect(await text('[data-stat=disabled-reason]')).toBe('manual');
      expect((await alice.get(`/v1/webhook_endpoints/${listed.id}`)).json).toMatchObject({
        enabled: false,
        disabled_reason: 'manual',
      });
      await page.getByRole('button', { name: 'Enable' }).click();
      await page.locator('.status-line', { hasText: 'enabled' }).waitFor();
      expect((await alice.get(`/v1/webhook_endpoints/${listed.id}`)).json.enabled).toBe(true);

      await page.getByRole('button', { name: 'Delete…' }).click();
      await page.getByRole('button', { name: 'Delete endpoint' }).click();
      await page.waitForURL(/\/console\/webhooks$/);
      expect((await alice.get(`/v1/webhook_endpoints/${listed.id}`)).status).toBe(404);
    } finally {
      await second.close();
    }
  });

  it("an endpoint's health shows the success rate, failures in a row and the latency chart of its recent attempts, as the API counts them", async () => {
    const ep = (await alice.get('/v1/webhook_endpoints')).json.data.find(
      (e: { url: string }) => e.url === receiver.url,
    );
    receiver.answer = () => ({ status: 503, body: 'down for a moment' });
    try {
      await alice.post('/v1/messages', { from: ALICE_NUMBER, to: DELIVERED, body: 'while the receiver is down' });
      // two events, each tried three times (the first try and two retries), all failing
      await until(async () => (await alice.get(`/v1/webhook_endpoints/${ep.id}`)).json.consecutive_failures >= 6);
    } finally {
      receiver.answer = () => ({ status: 200 });
    }
    const recent = (await alice.get(`/v1/webhook_endpoints/${ep.id}/attempts?limit=100`)).json.data as {
      succeeded: boolean;
    }[];
    const failures = (await alice.get(`/v1/webhook_endpoints/${ep.id}`)).json.consecutive_failures;
    await page.goto(consoleUrl(`/webhooks/${ep.id}`));
    await page.getByRole('heading', { name: 'Health' }).waitFor();
    const ok = recent.filter((a) => a.succeeded).length;
    expect(await text('[data-stat=success-rate]')).toBe(`${Math.round((100 * ok) / recent.length)}%`);
    expect(await text('[data-stat=consecutive-failures]')).toBe(String(failures));
    expect(await page.locator('svg.attempts-chart g.attempt').count()).toBe(recent.length);
    expect(await page.locator('svg.attempts-chart g.attempt.failed').count()).toBe(recent.length - ok);
    expect(await page.locator('tbody tr.row-failed').count()).toBeGreaterThanOrEqual(Math.min(6, recent.length - ok));
  });

  it('Recover since… re-sends what failed while the receiver was down, under the original event ids, and shows its progress; Send test event reaches this endpoint alone, and Health and Attempts follow it without a reload', async () => {
    const ep = (await alice.get('/v1/webhook_endpoints')).json.data.find(
      (e: { url: string }) => e.url === receiver.url,
    );
    // the previous test's events, their retries spent while the receiver answered 503
    const failed = await until(async () => {
      const { rows } = await db.pool.query<{ event_id: string }>(
        `SELECT event_id FROM webhook_deliveries WHERE endpoint_id = $1 AND status = 'failed'`,
        [ep.id],
      );
      return rows.length >= 2 && rows.map((r) => r.event_id);
    });
    const receivedBefore = receiver.received.length;
    await page.goto(consoleUrl(`/webhooks/${ep.id}`));
    await page.getByRole('heading', { name: 'Recover' }).waitFor();
    await page.getByRole('button', { name: 'Recover', exact: true }).click();
    const row = page.locator('tr[data-recovery]').first();
    await row.waitFor();
    const recovery = (await alice.get(`/v1/webhook_endpoints/${ep.id}/recoveries`)).json.data[0];
    expect(await row.getAttribute('data-recovery')).toBe(recovery.id);
    await until(
      async () => (await alice.get(`/v1/webhook_endpoints/${ep.id}/recoveries`)).json.data[0].status === 'completed',
    );
    // the page follows the recovery by itself, to its end
    await until(async () => (await row.locator('td').nth(2).innerText()) === 'completed');
    expect(Number(await row.locator('[data-stat=resent]').innerText())).toBe(failed.length);
    const resent = receiver.received.slice(receivedBefore).map((r) => r.headers['webhook-id']);
    expect([...resent].sort()).toEqual([...failed].sort());

    // the API's refusal of a moment in the future is shown as its detail
    await page.getByLabel('Recover since').fill('2999-01-01 00:00');
    await page.getByRole('button', { name: 'Recover', exact: true }).click();
    await page.getByText('since must not be in the future').waitFor();

    const other = await startReceiver();
    try {
      const second = await alice.post('/v1/webhook_endpoints', { url: other.url });
      other.secrets = [second.json.secret];
      await page.getByRole('button', { name: 'Send test event' }).click();
      const notice = page.getByRole('status').filter({ hasText: 'Test event' });
      const eventId = await notice.locator('code').innerText();
      const got = await until(async () => receiver.received.find((r) => r.headers['webhook-id'] === eventId));
      // without a reload, the page looks again until the test's attempt is in; then Health and Attempts say what
      // the API says, the recovery's re-sends and the test's attempt included
      const shownFirst = page.locator('section[aria-labelledby=attempts-h] tbody tr').first();
      await until(async () => (await shownFirst.innerText()).includes('webhook_endpoint.test'));
      const recent = (await alice.get(`/v1/webhook_endpoints/${ep.id}/attempts?limit=100`)).json.data as {
        event_id: string;
        succeeded: boolean;
      }[];
      expect(recent[0]!.event_id).toBe(eventId);
      const ok = recent.filter((a) => a.succeeded).length;
      expect(await text('[data-stat=success-rate]')).toBe(`${Math.round((100 * ok) / recent.length)}%`);
      expect(await page.getByText(/^of the last \d+ attempts?$/).innerText()).toBe(
        `of the last ${recent.length} attempts`,
      );
      expect(await text('[data-stat=consecutive-failures]')).toBe(
        String((await alice.get(`/v1/webhook_endpoints/${ep.id}`)).json.consecutive_failures),
      );
      expect(JSON.parse(got.body).type).toBe('webhook_endpoint.test');
      expect(got.verifiedWith).toEqual([true]);
      expect(await count(db.pool, 'SELECT * FROM webhook_deliveries WHERE event_id = $1', [eventId])).toBe(1);
      expect(other.received.filter((r) => r.headers['webhook-id'] === eventId)).toEqual([]);
      await alice.delete(`/v1/webhook_endpoints/${second.json.id}`);
    } finally {
      await other.close();
    }
  });

  it('the usage page charts the period by kind, with the totals the API gives for it', async () => {
    await page.goto(consoleUrl('/usage'));
    await page.getByRole('combobox', { name: 'Period' }).selectOption('24h');
    await page.waitForURL(/period=24h/);
    await page.locator('table.totals tr[data-kind=call_minute]').waitFor();
    expect(await page.locator('svg.usage-chart g.bucket').count()).toBe(24);
    // the period the page asked for: 24 whole UTC hours, in hourly buckets
    const asked = new URL(browser.requests.filter((u) => new URL(u).pathname === '/v1/usage').pop()!);
    const [from, to] = [asked.searchParams.get('from')!, asked.searchParams.get('to')!];
    expect(asked.searchParams.get('interval')).toBe('hour');
    expect(Date.parse(to) - Date.parse(from)).toBe(24 * 3_600_000);
    const usage = (await alice.get(`/v1/usage?from=${from}&to=${to}&interval=hour`)).json;
    const totals = usage.data as { kind: string; quantity: number }[];
    expect(totals.map((t) => t.kind)).toEqual(['call_minute', 'sms_segment_outbound']);
    for (const t of totals)
      expect(await text(`table.totals tr[data-kind=${t.kind}] td:last-child`)).toBe(String(t.quantity));
    // each bucket with usage is one bar per kind in it
    const bars = usage.buckets.reduce((n: number, b: { data: unknown[] }) => n + b.data.length, 0);
    expect(await page.locator('svg.usage-chart rect.bar').count()).toBe(bars);
  });

  it('messages page 20 at a time with Older and Newer, filters keep to what the API selects, and no request asks for more than a page', async () => {
    const sendAt = new Date(Date.now() + 86_400_000).toISOString();
    for (let i = 0; i < 45; i++) {
      expect(
        (await alice.post('/v1/messages', { from: ALICE_NUMBER, to: DELIVERED, body: `later ${i}`, send_at: sendAt }))
          .status,
      ).toBe(201);
    }
    const total = await count(db.pool, 'SELECT * FROM messages WHERE account_id = $1', [alice.accountId]);
    const requestsBefore = browser.requests.length;
    await page.goto(consoleUrl('/messages'));
    const rows = page.locator('table.list tbody tr');
    await rows.first().waitFor();
    const seen: string[] = [];
    const pages: number[] = [];
    for (;;) {
      const ids = await rows.evaluateAll((els) => els.map((e) => e.getAttribute('data-id')!));
      pages.push(ids.length);
      seen.push(...ids);
      const older = page.getByRole('button', { name: 'Older →' });
      if (await older.isDisabled()) break;
      const first = ids[0]!;
      await older.click();
      await page.locator(`tr[data-id="${first}"]`).waitFor({ state: 'detached' });
      await rows.first().waitFor();
    }
    const expected: number[] = [];
    for (let left = total; left > 0; left -= 20) expected.push(Math.min(20, left));
    expect(pages).toEqual(expected);
    expect(new Set(seen).size).toBe(total);
    // Newer walks back the way we came
    await page.getByRole('button', { name: '← Newer' }).click();
    await page.locator(`tr[data-id="${seen[20]}"]`).waitFor();
    expect(await rows.first().getAttribute('data-id')).toBe(seen[20]);

    await page.getByLabel('Status').selectOption('scheduled');
    await page.waitForURL(/status=scheduled/);
    await until(async () => (await rows.first().getAttribute('data-id')) === seen[0]);
    expect(new Set(await page.locator('table.list tbody .badge').allInnerTexts())).toEqual(new Set(['scheduled']));
    await page.getByLabel('Direction').selectOption('inbound');
    await page.getByText('No messages match these filters.').waitFor();

    const listCalls = browser.requests.slice(requestsBefore).filter((u) => new URL(u).pathname === '/v1/messages');
    expect(listCalls.length).toBeGreaterThan(0);
    expect(listCalls.every((u) => new URL(u).searchParams.get('limit') === '20')).toBe(true);
  });

  it('the opt-outs page lists a STOP texted to a number, adds one by hand, and opts a recipient back in, as the API says', async () => {
    const texter = '+14155550777';
    const added = '+14155550778';
    sim.injectInboundSms({ from: texter, to: ALICE_NUMBER, text: 'Stop' });
    await until(async () =>
      (await alice.get('/v1/opt_outs')).json.data.some((o: { recipient: string }) => o.recipient === texter),
    );
    await page.getByRole('link', { name: 'Opt-outs' }).click();
    await page.getByRole('heading', { name: 'Opt-outs', level: 1 }).waitFor();
    const row = (recipient: string) => page.locator('table.list tbody tr', { hasText: recipient });
    await row(texter).waitFor();
    expect(await row(texter).innerText()).toContain('Texted STOP');

    await page.getByText('Add an opt-out').click();
    await page.getByLabel('Recipient', { exact: true }).fill(added);
    await page.getByRole('button', { name: 'Add', exact: true }).click();
    await row(added).waitFor();
    expect(await row(added).innerText()).toContain('Added by you');

    // The filter finds one recipient; opting them back in takes them off the list.
    await page.getByLabel('Find a recipient').fill(texter);
    await page.getByLabel('Find a recipient').press('Enter');
    await page.waitForURL(/recipient=/);
    await row(added).waitFor({ state: 'detached' });
    // The filtered page may still be loading when the old rows go: wait for its row before counting.
    await row(texter).waitFor();
    expect(await page.locator('table.list tbody tr').count()).toBe(1);
    await row(texter)
      .getByRole('button', { name: `Opt ${texter} back in to ${ALICE_NUMBER}` })
      .click();
    await row(texter).waitFor({ state: 'detached' });
    const list = (await alice.get('/v1/opt_outs')).json.data as { recipient: string; source: string }[];
    expect(list.map((o) => [o.recipient, o.source])).toEqual([[added, 'api']]);
    // A send to the recipient still opted out is refused with the API's words.
    expect((await alice.post('/v1/messages', { from: ALICE_NUMBER, to: added, body: 'x' })).json.code).toBe(
      'recipient_opted_out',
    );
  });

  it("at a phone's width nothing overflows sideways, and the navigation still works", async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    try {
      for (const p of ['/messages', `/messages/${firstMessageId}`, '/calls', '/events', '/webhooks', '/usage']) {
        await page.goto(consoleUrl(p));
        await page.locator('main h1').waitFor();
        await page.waitForLoadState('networkidle');
        const overflow = await page.evaluate<number>('document.documentElement.scrollWidth - window.innerWidth');
        expect(overflow, `${p} overflows by ${overflow}px`).toBeLessThanOrEqual(0);
      }
      await page.getByRole('navigation', { name: 'Console' }).getByRole('link', { name: 'Calls' }).click();
      await page.getByRole('heading', { name: 'Calls', level: 1 }).waitFor();
      expect(await page.getByRole('link', { name: 'Calls' }).getAttribute('aria-current')).toBe('page');
    } finally {
      await page.setViewportSize({ width: 1280, height: 900 });
    }
  });

  it('signed out of Alice and in as Bob, nothing of Alice is shown anywhere, not even by Back, and her ids are 404', async () => {
    const aliceMessages = (await alice.get('/v1/messages?limit=100')).json.data.map((m: { id: string }) => m.id);
    const aliceTraces = [
      ...aliceMessages,
      ...(await alice.get('/v1/calls?limit=100')).json.data.map((c: { id: string }) => c.id),
      ...(await alice.get('/v1/events?limit=100')).json.data.map((e: { id: string }) => e.id),
      ...(await alice.get('/v1/webhook_endpoints')).json.data.map((e: { id: string }) => e.id),
      ALICE_NUMBER,
      receiver.url,
      alice.key,
      alice.accountId,
      'Hello from the console',
    ];
    await page.goto(consoleUrl(`/messages/${firstMessageId}`));
    await page.locator('ol.timeline li').first().waitFor();
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.waitForURL(/\/console\/sign-in$/);
    expect(await page.evaluate<string[]>('Object.values(sessionStorage)')).not.toContain(alice.key);
    await signIn(bob.key);

    // what the page shows of Alice's, beyond an id the address itself names (a heading repeats it)
    const shows = async () => {
      const html = await page.content();
      const address = decodeURIComponent(page.url());
      return aliceTraces.filter((t) => html.includes(t) && !address.includes(t));
    };
    for (const p of ['/messages', '/calls', '/events', '/webhooks', '/usage']) {
      await page.goto(consoleUrl(p));
      await page.locator('main h1').waitFor();
      await page.waitForLoadState('networkidle');
      expect(await shows(), p).toEqual([]);
    }
    await page.goto(consoleUrl(`/messages/${firstMessageId}`));
    expect(await page.getByRole('alert').innerText()).toBe('No such message');
    expect(await shows()).toEqual([]);
    // Back through the history this tab has (Alice's pages included): never her data again
    for (let i = 0; i < 8; i++) {
      if (!(await page.goBack())) break;
      await page.waitForLoadState('networkidle');
      expect(await shows(), page.url()).toEqual([]);
    }
  });

  it('no page threw and nothing was requested from another origin, over the whole run', () => {
    expect(browser.requests.length).toBeGreaterThan(100);
    expect(browser.pageErrors).toEqual([]);
    expect(browser.requests.filter((u) => new URL(u).origin !== new URL(base).origin)).toEqual([]);
  });
});
