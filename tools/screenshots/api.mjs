// The checkout's REST API as the screenshot scripts drive it: a shopper's cart, preview and order,
// the simulator's 3-D Secure approval, and waiting for an order's status. shoot.mjs and signin.mjs
// each give it the API's address and how to get a shopper's token on their stack.

// checkoutAPI returns the calls against api for orders of seller's SKUs; shopperToken(user) is a
// shopper's bearer token, keyPrefix starts each order's Idempotency-Key.
export function checkoutAPI({ api, seller, shopperToken, keyPrefix }) {
  async function call(method, path, tok, body, headers = {}) {
    const res = await fetch(api + path, {
      method,
      headers: { Authorization: `Bearer ${tok}`, 'Content-Type': 'application/json', ...headers },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${text}`);
    return text ? JSON.parse(text) : {};
  }

  // placeOrder empties the shopper's cart, fills it with lines ({skuId: quantity}) and orders it.
  async function placeOrder(user, lines, paymentMethodToken) {
    const tok = await shopperToken(user);
    for (const item of (await call('GET', '/api/v1/cart', tok)).items ?? []) {
      await call('PUT', `/api/v1/cart/items/${item.skuId}`, tok, { sellerId: item.sellerId, quantity: 0 });
    }
    for (const [skuId, quantity] of Object.entries(lines)) {
      await call('PUT', `/api/v1/cart/items/${skuId}`, tok, { sellerId: seller, quantity });
    }
    const { priceVersion } = await call('POST', '/api/v1/checkout/preview', tok);
    let { addresses } = await call('GET', '/api/v1/addresses', tok);
    if (!addresses?.length) {
      // A shopper the demo data gave no address to (the harness's own, on the cluster) adds one.
      addresses = [await call('POST', '/api/v1/addresses', tok,
        { city: 'Istanbul', line1: 'Bağdat Caddesi 120, Kadıköy', lat: 40.978, lon: 29.063 })];
    }
    // Unique per run, so a re-run never meets an old answer recorded under the same key.
    const key = `${keyPrefix}-${Date.now().toString(36)}-${Object.keys(lines).join('-')}`;
    const placed = await call('POST', '/api/v1/orders', tok,
      { priceVersion, addressId: addresses[0].addressId, paymentMethodToken }, { 'Idempotency-Key': key });
    console.log(`order ${placed.orderId} (shopper ${user}, ${paymentMethodToken}): ${placed.status}`);
    return { ...placed, tok, workflowId: `order-u${user}-${key}` };
  }

  // approve presses Approve on the simulator's 3-D Secure page, as the shopper's browser would.
  async function approve(order) {
    const res = await fetch(order.payment.redirectUrl, { method: 'POST', body: new URLSearchParams({ result: 'approve' }) });
    if (!res.ok) throw new Error(`3-D Secure approve of order ${order.orderId}: ${res.status}`);
  }

  async function waitStatus(order, status, seconds = 60) {
    const deadline = Date.now() + seconds * 1000;
    let last;
    while (Date.now() < deadline) {
      last = await call('GET', `/api/v1/orders/${order.orderId}`, order.tok);
      if (last.status === status) return last;
      await new Promise((r) => setTimeout(r, 250));
    }
    throw new Error(`order ${order.orderId} is ${last?.status}, not ${status}, after ${seconds}s`);
  }

  return { call, placeOrder, approve, waitStatus };
}
