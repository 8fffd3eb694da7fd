// The memory browser in Chromium, driven by playwright-core; run by tests/it/browser.rs, which stores the
// memories first and passes their ids in UI_* variables. Each step asserts what a user would see; the
// last stdout line is a JSON report. Screenshots of every view go to UI_SHOTS.
import assert from "node:assert/strict";
import { chromium } from "playwright-core";

const env = (name) => {
  const value = process.env[name];
  assert.ok(value, `${name} is not set`);
  return value;
};
const base = env("UI_BASE");
const shots = env("UI_SHOTS");
const ids = { script: env("UI_SCRIPT_ID"), forget: env("UI_FORGET_ID"), bob: env("UI_BOB_ID"), fix: env("UI_FIX_ID") };

// The flags this machine's Chromium needs headless and offline (no background connections, no sandbox as root).
const browser = await chromium.launch({
  executablePath: env("UI_CHROMIUM"),
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync"],
});
const report = { ok: false };
try {
  const alice = await browser.newContext({ viewport: { width: 1440, height: 900 } });
  const page = await alice.newPage();
  const dialogs = [];
  page.on("dialog", (d) => { dialogs.push(d.message()); d.dismiss(); });
  const shot = (name, p = page) => p.screenshot({ path: `${shots}/${name}.png`, fullPage: true });

  // Without a session every page leads to the login form; a token logs in once.
  await page.goto(`${base}/`);
  assert.equal(new URL(page.url()).pathname, "/login");
  await shot("login");
  await page.getByLabel("Bearer token").fill(env("UI_ALICE_TOKEN"));
  await page.getByRole("button", { name: "Log in" }).click();
  await page.waitForURL(`${base}/`);
  assert.equal(await page.locator("h1").textContent(), "Overview");
  assert.match(await page.locator(".who").textContent(), /alice/);
  assert.ok(await page.locator("svg.chart rect").count() === 30, "a bar per day of the chart");

  await shot("overview");
  // Keyboard: the first Tab lands on the skip link, which moves focus to the content.
  await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => document.activeElement.textContent), "Skip to content");
  await page.keyboard.press("Enter");
  assert.equal(await page.evaluate(() => document.activeElement.id), "main");

  // Fixes: verified, and changed around (app.txt changed after the fix's receipt, outside git: by its hash).
  await page.getByRole("navigation", { name: "Memory" }).getByRole("link", { name: "Fixes" }).click();
  await page.waitForURL(`${base}/fixes`);
  const row = page.locator("table.list tbody tr").first();
  assert.match(await row.textContent(), /verified/);
  assert.match(await row.textContent(), /changed around/);
  await shot("fixes");
  await row.getByRole("link").click();
  await page.waitForURL(`${base}/fixes/${ids.fix}`);
  assert.match(await page.locator(".facts").first().textContent(), /app\.txt/);
  await shot("fix");

  // Archival: the stored <script> is text, inert, and flagged.
  await page.goto(`${base}/archival`);
  await shot("archival");
  await page.goto(`${base}/archival/${ids.script}`);
  assert.match(await page.locator("pre.text").textContent(), /<script>alert\('pwned'\)<\/script>/);
  assert.equal(await page.locator("script").count(), 0, "no script element on the page");
  assert.match(await page.locator(".flag").textContent(), /Reads like instructions/);
  assert.deepEqual(dialogs, [], "no stored script ran");
  await shot("passage");

  // Conversations: the tool calls this server recorded, as one thread per session.
  await page.goto(`${base}/conversations`);
  assert.ok(await page.locator("table.list tbody tr").count() >= 1, "a thread");
  await shot("conversations");
  await page.locator("table.list tbody tr a").first().click();
  assert.ok(await page.locator("ol.thread li").count() >= 1, "items of the thread");
  await shot("conversation");

  // Search: the tools' search, with each ranking's rank and score.
  await page.goto(`${base}/search`);
  await page.getByLabel("Query").fill("idempotency key retries payments");
  await page.getByLabel("in", { exact: true }).selectOption("archival");
  await page.getByRole("button", { name: "Search" }).click();
  await page.waitForURL(/\/search\?q=/);
  const hit = page.locator("article.hit").first();
  assert.match(await hit.textContent(), /idempotency/);
  assert.match(await hit.locator(".ranking").textContent(), /cosine .*BM25/s);
  await shot("search");

  // Forget a passage (after a confirmation page); the list says so and the passage is gone.
  await page.goto(`${base}/archival/${ids.forget}`);
  await page.getByRole("link", { name: "Forget this passage…" }).click();
  await page.waitForURL(`${base}/forget/${ids.forget}`);
  await shot("forget");
  await page.getByRole("button", { name: "Forget it" }).click();
  await page.waitForURL(`${base}/archival?forgot=${ids.forget}`);
  assert.match(await page.getByRole("status").textContent(), /Forgot/);
  const gone = await page.goto(`${base}/archival/${ids.forget}`);
  assert.equal(gone.status(), 404);

  // Core memory: restore version 1 of `project`; the diff shows what changed.
  await page.goto(`${base}/core`);
  await shot("core");
  await page.getByRole("link", { name: "project", exact: true }).click();
  await page.getByRole("button", { name: "Restore version 1" }).click();
  await page.waitForURL(/\/core\/project\?saved=3/);
  report.restored = await page.getByLabel(/^Value/).inputValue();
  await page.goto(`${base}/core/project?from=2&to=3`);
  assert.match(await page.locator("pre.diff .del").textContent(), /staging cluster/);
  await shot("block");
  // ... and purge version 2, which held it, from the history through its confirmation page.
  await page.goto(`${base}/core/project`);
  await page.getByRole("link", { name: "Purge version 2" }).click();
  await page.getByRole("button", { name: "Purge version 2" }).click();
  await page.waitForURL(/\/core\/project\?purged=2/);
  assert.match(await page.getByRole("status").textContent(), /Version 2 is purged/);
  assert.doesNotMatch(await page.content(), /staging cluster/);
  const exported = await alice.request.get(`${base}/export`);
  assert.equal(exported.status(), 200);
  assert.doesNotMatch(await exported.text(), /staging cluster/, "the store no longer holds version 2");

  // A change from a foreign origin, with the session cookie and a valid CSRF token, is refused.
  await page.goto(`${base}/forget/${ids.script}`);
  const csrf = await page.locator("input[name=csrf]").first().inputValue();
  const forged = await alice.request.post(`${base}/forget/${ids.script}`, {
    headers: { Origin: "http://evil.example" }, form: { csrf }, maxRedirects: 0,
  });
  assert.equal(forged.status(), 403, "a foreign origin may not forget");
  const stillThere = await page.goto(`${base}/archival/${ids.script}`);
  assert.equal(stillThere.status(), 200);

  // 375 px wide: nothing wider than the screen.
  const phone = await alice.newPage();
  await phone.setViewportSize({ width: 375, height: 812 });
  for (const path of ["/", "/fixes", "/archival", `/archival/${ids.script}`, "/core/project", "/search?q=payments"]) {
    await phone.goto(`${base}${path}`);
    const width = await phone.evaluate(() => document.documentElement.scrollWidth);
    assert.ok(width <= 375, `${path} is ${width} px wide at 375 px`);
  }
  await phone.goto(`${base}/`);
  await shot("mobile", phone);

  // bob, in his own browser, sees only his memories; alice's ids are 404 by direct URL.
  const bob = await browser.newContext();
  const bobPage = await bob.newPage();
  await bobPage.goto(`${base}/login`);
  await bobPage.getByLabel("Bearer token").fill(env("UI_BOB_TOKEN"));
  await bobPage.getByRole("button", { name: "Log in" }).click();
  await bobPage.waitForURL(`${base}/`);
  await bobPage.goto(`${base}/archival`);
  const listed = await bobPage.locator("main").textContent();
  assert.match(listed, /VPN config/);
  assert.doesNotMatch(listed, /idempotency|pwned/);
  for (const path of [`/archival/${ids.script}`, `/fixes/${ids.fix}`, `/forget/${ids.script}`]) {
    const response = await bobPage.goto(`${base}${path}`);
    assert.equal(response.status(), 404, `${path} is not bob's`);
  }
  report.ok = true;
} catch (error) {
  // what the pages showed when it failed, for the test's output and artifacts
  let n = 0;
  for (const context of browser.contexts()) {
    for (const p of context.pages()) {
      n += 1;
      console.error(`page ${n} at ${p.url()}:\n${(await p.locator("body").innerText().catch(() => "")).slice(0, 2000)}`);
      await p.screenshot({ path: `${shots}/failure-${n}.png`, fullPage: true }).catch(() => {});
    }
  }
  throw error;
} finally {
  await browser.close();
  console.log(JSON.stringify(report));
}
