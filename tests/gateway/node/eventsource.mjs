// Opens a page of the gateway in headless Chromium and, in it, a bare EventSource on a stream URL (argv[3]), as a
// page that leaves a finished run's stream open would: no handler closes it. Prints one JSON line once the
// EventSource is closed for good and `quietS` (argv[5]) more seconds passed, or after the timeout (argv[4]): the ids
// of the events it received, how often it opened and failed, and its readyState (2: closed, no more reconnects).
import { launchBrowser } from "./browser.mjs";

const [pageUrl, streamUrl, timeoutS = "60", quietS = "5"] = process.argv.slice(2);
const browser = await launchBrowser();
try {
  const page = await browser.newPage();
  await page.goto(pageUrl, { waitUntil: "domcontentloaded" });
  await page.evaluate((url) => {
    const seen = { ids: [], opens: 0, errors: 0, readyState: 0 };
    const source = new EventSource(url);
    source.onopen = () => { seen.opens++; };
    source.onmessage = (event) => { seen.ids.push(event.lastEventId); };
    source.onerror = () => { seen.errors++; };
    window.seen = () => ({ ...seen, readyState: source.readyState });
  }, streamUrl);
  const deadline = Date.now() + Number(timeoutS) * 1000;
  let state = await page.evaluate(() => window.seen());
  while (state.readyState !== 2 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    state = await page.evaluate(() => window.seen());
  }
  if (state.readyState === 2) {
    await new Promise((resolve) => setTimeout(resolve, Number(quietS) * 1000));
    state = await page.evaluate(() => window.seen());
  }
  process.stdout.write(JSON.stringify(state) + "\n");
} finally {
  await browser.close();
}
