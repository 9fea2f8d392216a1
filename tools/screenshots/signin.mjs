// Staff sign in to `make cluster`'s Temporal Web UI through the cluster's identity provider, in a
// real browser, and it is photographed for docs/runbook.md: the provider's sign-in page, support's
// view of the orders, an order decoded with her token, support-action sent from the UI to an order
// parked by the payment provider's outage (the order ends CONFIRMED and names her), and a
// shopper's sign-in refused. cluster.sh starts the private cluster it talks to (make
// screenshots-signin) and gives it the cluster's settings (checkout.env) and its people's
// passwords. Any step not as expected fails it.
import { execFileSync } from 'node:child_process';
import { createHash, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { checkoutAPI } from './api.mjs';

const API = process.env.API_URL ?? 'http://localhost:8080';
const UI = process.env.UI_URL ?? 'http://localhost:8233';
const OUT = process.env.OUT_DIR ?? 'docs/screenshots';
const CHECKOUT_DEV = process.env.CHECKOUT_DEV_BIN ?? 'bin/checkout-dev';
const { passwords } = JSON.parse(readFileSync(process.env.OIDC_SECRETS ?? '.data/cluster/oidc/secrets.json', 'utf8'));
const SELLER = 42; // the demo seller of SKUs 71–81

// The cluster's CA (ca.pem of its tls folder): the browser accepts the certificate of the codec
// endpoint's https frontend because the CA's key, which signs it and follows it in the chain, is
// pinned (its SPKI's SHA-256), and no other certificate it cannot verify.
const CA_FILE = process.env.CLUSTER_CA ?? '.data/cluster/tls/ca.pem';
const caSPKI = createHash('sha256')
  .update(new X509Certificate(readFileSync(CA_FILE)).publicKey.export({ type: 'spki', format: 'der' }))
  .digest('base64');

// Shoppers' tokens from the cluster's provider as the harness gets them (bin/checkout-dev token,
// with checkout.env's settings); the API takes no other. Staff sign in through the browser.
const shopperToken = (user) =>
  execFileSync(CHECKOUT_DEV, ['token', '--user', String(user)]).toString().trim();

const { call, placeOrder, approve, waitStatus } = checkoutAPI({ api: API, seller: SELLER, shopperToken,
  keyPrefix: 'signin' });

function check(ok, what) {
  if (!ok) throw new Error(what);
}

const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', `--ignore-certificate-errors-spki-list=${caSPKI}`],
});
const shot = async (page, name) => {
  await page.mouse.move(700, 700); // no hover tooltip in the picture
  await page.screenshot({ path: join(OUT, name) });
  console.log(`wrote ${join(OUT, name)}`);
};

// toSignInPage opens the UI in a fresh browser context (no cookies, no storage) and follows it to
// the provider's sign-in page, whose name and password it fills in for who.
async function toSignInPage(who) {
  const context = await browser.newContext({ viewport: { width: 1400, height: 900 }, timezoneId: 'UTC' });
  const page = await context.newPage();
  page.setDefaultTimeout(30_000);
  await page.goto(UI);
  // The UI answers a browser without a session with its own page, whose one button goes to SSO.
  await page.getByRole('button', { name: 'Continue to SSO' }).click();
  await page.locator('#username').waitFor();
  const issuer = new URL(page.url()).origin;
  check(issuer !== new URL(UI).origin, `the UI's sign-in stayed on the UI (${page.url()})`);
  await page.getByRole('heading', { name: 'Checkout staff sign-in' }).waitFor();
  await page.locator('#username').fill(who);
  await page.locator('#password').fill(passwords[who]);
  return { context, page, issuer };
}

// signIn presses Sign in and waits for the UI's workflow list; it answers the access token the UI
// keeps for the person and sends with each request.
async function signIn(page) {
  await page.locator('#submit').click();
  await page.waitForURL(`${UI}/namespaces/default/workflows**`);
  const user = await page.evaluate(() => localStorage.getItem('AuthUser'));
  const token = JSON.parse(user ?? '{}').accessToken;
  check(token, `the UI keeps no access token after the sign-in: ${user}`);
  return token;
}

const claimsOf = (token) => JSON.parse(Buffer.from(token.split('.')[1], 'base64url').toString());

try {
  // --- real state: one confirmed order, one parked by the provider's outage ---

  // Ops turns the payment simulator's money-down switch: oscar, signed in through the UI (the API
  // takes staff tokens only from the provider).
  const asOscar = await toSignInPage('oscar');
  const ops = await signIn(asOscar.page);
  check(claimsOf(ops).role === 'ops', `oscar's token says role ${claimsOf(ops).role}`);
  await asOscar.context.close();
  await call('PUT', '/api/v1/ops/payment-faults', ops, {}); // none to begin with

  const confirmed = await placeOrder(1_000_007, { 71: 1 }, 'tok_3ds');
  await approve(confirmed);
  await waitStatus(confirmed, 'CONFIRMED');

  const parked = await placeOrder(1_000_008, { 73: 1, 75: 2 }, 'tok_3ds');
  // The provider keeps answering lookups; only the capture after the approval fails.
  await call('PUT', '/api/v1/ops/payment-faults', ops, { moneyDownForSeconds: 600 });
  // Each process trusts its copy of the simulator's faults for a moment (paysim's faultsTTL).
  await new Promise((r) => setTimeout(r, 1000));
  await approve(parked);
  const { attention } = await waitStatus(parked, 'NEEDS_ATTENTION');
  console.log(`order ${parked.orderId} parked: step ${attention.step}: ${attention.code}`);

  // --- support signs in ---

  const asAlice = await toSignInPage('alice');
  const page = asAlice.page;
  await shot(page, 'signin-page.png');
  const alice = await signIn(page);
  const claims = claimsOf(alice);
  check(claims.role === 'support' && claims.sub === '901' && claims.iss === asAlice.issuer,
    `alice's token: ${JSON.stringify(claims)}`);
  console.log(`alice signed in at ${asAlice.issuer}: sub ${claims.sub}, role ${claims.role}`);

  // The orders, as support finds them: visibility follows the order's search attributes a moment
  // later, so reload until both rows are there.
  const listUrl = `${UI}/namespaces/default/workflows?query=${encodeURIComponent('WorkflowType = "OrderWorkflow"')}`;
  for (let i = 0; ; i++) {
    await page.goto(listUrl);
    try {
      for (const o of [confirmed, parked]) {
        await page.getByRole('link', { name: o.workflowId, exact: true }).first().waitFor({ timeout: 10_000 });
      }
      break;
    } catch (err) {
      if (i === 10) throw err;
    }
  }
  await page.getByRole('button', { name: 'Collapse saved views' }).click();
  await page.getByTestId('workflows-summary-table-configuration-button').click();
  for (const col of ['Run ID', 'Type', 'End']) await page.getByRole('button', { name: `Remove ${col} column` }).click();
  for (const col of ['OrderId', 'OrderStatus', 'PaymentStatus', 'NeedsAttention']) {
    await page.getByRole('button', { name: `Add ${col} column` }).click();
  }
  await page.getByTestId('drawer-close-button').click();
  await page.locator('#workflows-table-configuration-drawer').waitFor({ state: 'hidden' });
  await page.getByRole('columnheader', { name: 'NeedsAttention' }).waitFor();
  await page.evaluate(() => document.querySelectorAll('*').forEach((el) => { el.scrollTop = 0; }));
  await shot(page, 'signin-support-list.png');

  // --- a shopper signs in: the provider knows him, Temporal refuses him ---

  const asSam = await toSignInPage('sam');
  const forbidden = [];
  asSam.page.on('response', (r) => {
    if (r.url().startsWith(`${UI}/api/v1/`) && r.status() === 403) forbidden.push(new URL(r.url()).pathname);
  });
  await asSam.page.locator('#submit').click();
  await asSam.page.waitForURL(`${UI}/login?**`);
  await asSam.page.getByText('Request unauthorized.').waitFor();
  check(new URL(asSam.page.url()).searchParams.get('error') === 'Request unauthorized.',
    `the shopper's sign-in ended at ${asSam.page.url()}`);
  check(forbidden.length > 0, "the shopper was sent back without Temporal refusing his token");
  await shot(asSam.page, 'signin-shopper-refused.png');
  console.log(`sam's sign-in refused: 403 on ${[...new Set(forbidden)].join(', ')}; the UI says Request unauthorized.`);
  await asSam.context.close();

  // --- support decodes an order and retries the parked one ---

  // The confirmed order, decoded with her token (the UI passes it to the API's /codec): no
  // decoding session, no codec settings. The UI shows its codec error message where it could not.
  const { Codec: codec } = await (await fetch(`${UI}/api/v1/settings`)).json();
  check(codec.Endpoint.startsWith('https://'), `the UI's codec endpoint is ${codec.Endpoint}: the UI passes ` +
    'the access token only to an https:// one');
  const codecCalls = [];
  const codecAnswers = [];
  page.on('request', (r) => { if (r.url().startsWith(codec.Endpoint)) codecCalls.push(r.url()); });
  page.on('requestfailed', (r) => {
    if (r.url().startsWith(codec.Endpoint)) codecAnswers.push(`${r.url()}: ${r.failure()?.errorText}`);
  });
  page.on('response', (r) => {
    if (r.url().startsWith(codec.Endpoint) && r.request().method() === 'POST') codecAnswers.push(`${r.url()}: ${r.status()}`);
  });
  await page.goto(`${UI}/namespaces/default/workflows/${encodeURIComponent(confirmed.workflowId)}`);
  const decoded = page.getByText('"priceVersion"').first();
  await decoded.or(page.getByText(codec.DefaultErrorMessage).first()).waitFor();
  if (!(await decoded.isVisible())) {
    // A browser that does not trust the cluster's CA never sends the request
    // (net::ERR_CERT_AUTHORITY_INVALID among the answers).
    throw new Error(`the UI did not decode the order for alice: it shows "${codec.DefaultErrorMessage}" after ` +
      `${codecCalls.length} requests to its codec endpoint ${codec.Endpoint} (${codecAnswers.join('; ')})`);
  }
  await page.getByText('"CAPTURED"').first().waitFor();
  check(codecAnswers.every((a) => a.endsWith(': 200')), `the codec endpoint's answers: ${codecAnswers.join('; ')}`);
  console.log(`decoded by ${codec.Endpoint}: ${codecAnswers.length} answers (${[...new Set(codecAnswers.map((a) => a.split(': ')[1]))].join(', ')})`);
  await shot(page, 'signin-support-decoded.png');

  // support-action to the parked order, from the UI: More Actions, Send an Update.
  await page.goto(`${UI}/namespaces/default/workflows/${encodeURIComponent(parked.workflowId)}`);
  await page.getByText('"priceVersion"').first().waitFor();
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
  await shot(page, 'signin-support-action.png');

  // The provider is back: the update is sent, encoded by /codec with her token, and passes the
  // authorizer; the capture runs again.
  await call('PUT', '/api/v1/ops/payment-faults', ops, {});
  await dialog.getByRole('button', { name: 'Submit' }).click();
  await page.getByText('Update successful').waitFor();
  await waitStatus(parked, 'CONFIRMED');
  console.log(`order ${parked.orderId} CONFIRMED after support-action retry from the UI`);

  // The order names alice, from her token: its staff actions and its timeline, as support reads
  // them through the API.
  const seen = await call('GET', `/api/v1/orders/${parked.orderId}`, alice);
  const action = (seen.staffActions ?? []).find((a) => a.action === 'retry');
  check(action?.actor?.sub === '901' && action.actor.name === 'Alice Support' && action.actor.role === 'support' &&
    action.actor.via === 'temporal-ui', `the retry's staff action: ${JSON.stringify(seen.staffActions)}`);
  const entry = seen.timeline.find((e) => e.kind === 'support_action');
  check(JSON.stringify(entry?.detail ?? {}).includes('Alice Support'),
    `the timeline's support_action does not name alice: ${JSON.stringify(seen.timeline)}`);
  console.log(`order ${parked.orderId}: retry by ${action.actor.name} (sub ${action.actor.sub}, via ${action.actor.via}), in the timeline`);
  await asAlice.context.close();
} finally {
  await browser.close();
}
