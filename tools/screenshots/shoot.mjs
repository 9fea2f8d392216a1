// Makes real orders through the checkout API, parks two in NEEDS_ATTENTION by stopping the payment
// provider moving money (it still confirms the approvals), and photographs the Temporal Web UI for docs/runbook.md: first an order's
// encrypted payloads as anyone without a support session sees them, then support signing in for
// decoding and setting up the UI's codec once, the same order decoded; then sends support-action
// from the UI to a parked order and checks that it becomes CONFIRMED; last, the 3-D Secure order's
// trace in Jaeger. run.sh starts the private stack it talks to (make screenshots).
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { checkoutAPI } from './api.mjs';

const API = process.env.API_URL ?? 'http://127.0.0.1:18080';
const UI = process.env.UI_URL ?? 'http://127.0.0.1:18233';
const JAEGER = process.env.JAEGER_URL ?? 'http://127.0.0.1:18686';
const OUT = process.env.OUT_DIR ?? 'docs/screenshots';
const CHECKOUT = process.env.CHECKOUT_BIN ?? 'bin/checkout';
const SELLER = 42; // the demo seller of SKUs 71–81

const token = (user, role) =>
  execFileSync(CHECKOUT, ['token', '--user', String(user), '--role', role]).toString().trim();
const ops = token(901, 'ops');
const support = token(900, 'support');

const { call, placeOrder, approve, waitStatus } = checkoutAPI({ api: API, seller: SELLER,
  shopperToken: (user) => token(user, 'shopper'), keyPrefix: 'shots' });

// --- real state: one confirmed order, one waiting for 3-D Secure, two parked ---

const confirmed = await placeOrder(7, { 71: 1 }, 'tok_3ds');
await approve(confirmed);
await waitStatus(confirmed, 'CONFIRMED');

const pending = await placeOrder(8, { 72: 1 }, 'tok_3ds');
await waitStatus(pending, 'PENDING_PAYMENT');

const parked = await placeOrder(7, { 73: 1, 75: 2 }, 'tok_3ds');
const alsoParked = await placeOrder(8, { 74: 1 }, 'tok_3ds'); // stays parked: the list shows two
// The order checks an approval with the provider before acting on it, so the provider keeps
// answering lookups; only the capture after the approval fails.
await call('PUT', '/api/v1/ops/payment-faults', ops, { moneyDownForSeconds: 600 });
for (const order of [alsoParked, parked]) {
  await approve(order);
  const { attention } = await waitStatus(order, 'NEEDS_ATTENTION');
  console.log(`order ${order.orderId} parked: step ${attention.step}: ${attention.code}`);
}

// --- the Temporal UI ---

// A fresh profile, inside run.sh's data folder so that it goes with it even when this is killed.
const userDataDir = mkdtempSync(join(process.env.DATA_DIR ?? tmpdir(), 'chromium-'));
const browser = await chromium.launchPersistentContext(userDataDir, {
  executablePath: '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
  viewport: { width: 1400, height: 900 },
  timezoneId: 'UTC',
});
try {
  const page = browser.pages()[0] ?? (await browser.newPage());
  page.setDefaultTimeout(30_000);
  // showDetails opens the workflow's "User Metadata" tab and waits for its current details (a
  // markdown frame, the last one on the page) to say text.
  const showDetails = async (text) => {
    await page.getByRole('tab', { name: 'User Metadata' }).click();
    const frame = page.locator('iframe[title="output"]').last();
    await frame.contentFrame().getByText(text).first().waitFor();
    // The UI sizes the frame before the text wraps, cutting off its last lines: fit it to them.
    await frame.evaluate((f) => { f.style.height = `${f.contentDocument.documentElement.scrollHeight + 16}px`; });
  };
  const shot = async (name) => {
    await page.screenshot({ path: join(OUT, name) });
    console.log(`wrote ${join(OUT, name)}`);
  };

  const orderPage = (order) => `${UI}/namespaces/default/workflows/${encodeURIComponent(order.workflowId)}`;

  // 1. Without a support session: the order's payloads are encrypted and the UI says that the
  // codec server (the API, which it was pointed at) did not decode them.
  await page.goto(orderPage(confirmed));
  await page.getByText('Codec Server could not connect').filter({ visible: true }).first().waitFor();
  await page.getByText('"encryption-key-id"').first().waitFor();
  await page.mouse.move(700, 700);
  await shot('codec-no-access.png');

  // 2. Support signs in for decoding on the API's page: the token becomes this browser's session
  // (an HttpOnly cookie for /codec only).
  await page.goto(`${API}/codec/session`);
  await page.locator('#token').fill(support);
  await page.getByRole('button', { name: 'Turn decoding on' }).click();
  await page.locator('#session-on').waitFor();
  await shot('codec-session.png');

  // 3. Once per browser, the UI's codec settings: the API's endpoint, with credentials included.
  await page.goto(orderPage(confirmed));
  await page.getByText('Codec Server could not connect').filter({ visible: true }).first().waitFor();
  await page.locator('nav[data-testid="top-nav"] [data-testid^="data-encoder-status"]').click();
  await page.getByTestId('override-accordion').click();
  await page.getByText('Use my browser setting and ignore Cluster-level setting.', { exact: true }).last().click();
  // Folded again: the settings panel has a fixed height and the page's header covers what overflows.
  await page.getByTestId('override-accordion').getByRole('button').first().click();
  await page.locator('#data-encoder-endpoint-input').fill(`${API}/codec`);
  await page.getByTestId('data-encoder-include-credentials').click();
  await page.getByTestId('data-encoder-cross-origin-credentials').waitFor();
  await shot('codec-settings.png');
  await page.getByTestId('confirm-data-encoder-button').click();

  // 4. The same order, decoded for support: its input and its result.
  await page.goto(orderPage(confirmed));
  await page.getByText('"priceVersion"').first().waitFor();
  await page.getByText('"CAPTURED"').first().waitFor();
  await page.mouse.move(700, 700);
  await shot('codec-decoded.png');

  // 5. The list filtered with NeedsAttention = true. Visibility follows the search-attribute
  // upsert a moment later, so reload until the row is there.
  const listUrl = `${UI}/namespaces/default/workflows?query=${encodeURIComponent('NeedsAttention = true')}`;
  const row = page.getByRole('link', { name: parked.workflowId, exact: true });
  for (let i = 0; ; i++) {
    await page.goto(listUrl);
    try {
      await row.first().waitFor({ timeout: 10_000 });
      break;
    } catch (err) {
      if (i === 10) throw err;
    }
  }
  // The query as text rather than the filter chip, which hides the value.
  await page.getByTestId('toggle-manual-query').click();
  // Room for the order's own search attributes: saved views folded, Run ID, Type and End (all
  // the same here) out, the attributes in. Kept in this fresh browser profile only.
  await page.getByRole('button', { name: 'Collapse saved views' }).click();
  await page.getByTestId('workflows-summary-table-configuration-button').click();
  for (const col of ['Run ID', 'Type', 'End']) await page.getByRole('button', { name: `Remove ${col} column` }).click();
  for (const col of ['OrderId', 'CustomerId', 'OrderStatus', 'PaymentStatus']) {
    await page.getByRole('button', { name: `Add ${col} column` }).click();
  }
  await page.getByTestId('drawer-close-button').click();
  await page.locator('#workflows-table-configuration-drawer').waitFor({ state: 'hidden' });
  await page.getByRole('columnheader', { name: 'PaymentStatus' }).waitFor();
  await page.getByTestId('manual-search-input').waitFor();
  await page.mouse.move(700, 700); // no hover tooltip in the picture
  await page.evaluate(() => document.querySelectorAll('*').forEach((el) => { el.scrollTop = 0; }));
  await shot('needs-attention-list.png');

  // 6. The parked order's current details (the UI's "User Metadata" tab).
  await row.first().click();
  await showDetails('Needs attention');
  await shot('needs-attention-order.png');

  // 7. support-action, as an update (the UI sends it and shows the answer), filled in and shown.
  await page.getByRole('button', { name: 'More Actions' }).click();
  await page.getByRole('menuitem', { name: 'Send an Update' }).click();
  const dialog = page.getByRole('dialog').filter({ hasText: 'Send an Update' });
  await dialog.getByTestId('update-select-button').click();
  await dialog.getByRole('option', { name: 'support-action', exact: true }).click();
  const data = dialog.locator('.cm-content');
  await data.click();
  // insertText, not typing: the editor would add closing quotes and braces of its own.
  await page.keyboard.insertText('{"action": "retry", "reason": "provider recovered"}');
  await data.blur(); // the editor formats the JSON on blur
  await dialog.getByText('"provider recovered"').waitFor();
  await shot('support-action.png');

  // The provider is back: send it, and the capture runs again.
  await call('PUT', '/api/v1/ops/payment-faults', ops, {});
  await dialog.getByRole('button', { name: 'Submit' }).click();
  await page.getByText('Update successful').waitFor();
  await waitStatus(parked, 'CONFIRMED');
  console.log(`order ${parked.orderId} CONFIRMED after support-action retry`);

  // 8. The same order afterwards: its details say CONFIRMED, payment CAPTURED.
  await page.reload(); // without the "Update successful" toast
  await showDetails('CAPTURED');
  await shot('order-details.png');

  // 9. The 3-D Secure order's trace in Jaeger, from POST /orders to CONFIRMED: found by its
  // order.id tag, the trace of its POST /orders (the steps after the approval run under the same
  // workflow run). The spans arrive in batches: ask until the last step is there.
  const query = `${JAEGER}/api/traces?service=checkout&tags=${encodeURIComponent(JSON.stringify({ 'order.id': String(confirmed.orderId) }))}&limit=20`;
  let traceID;
  for (let i = 0; !traceID; i++) {
    const { data } = await (await fetch(query)).json();
    traceID = (data ?? []).find((t) => t.spans.some((s) => s.operationName === 'POST /api/v1/orders')
      && t.spans.some((s) => s.operationName === 'RunActivity:Finish'))?.traceID;
    if (!traceID) {
      if (i === 60) throw new Error(`no complete trace of order ${confirmed.orderId} in Jaeger`);
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
  await page.goto(`${JAEGER}/trace/${traceID}`);
  await page.getByText('RunActivity:Finish').first().waitFor();
  await page.mouse.move(0, 0);
  await page.screenshot({ path: join(OUT, 'order-trace.png'), fullPage: true });
  console.log(`wrote ${join(OUT, 'order-trace.png')}`);
} finally {
  await browser.close();
  rmSync(userDataDir, { recursive: true, force: true });
}
