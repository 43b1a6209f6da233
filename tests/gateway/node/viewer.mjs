// Opens the gateway's viewer page in headless Chromium and prints its state as JSON lines: "ready" once the page
// runs, then its final state once the run finished (or after the timeout in seconds, argv[3]); with argv[4], a
// thread page's state once that many of its runs ended.
import { launchBrowser } from "./browser.mjs";

const [url, timeoutS = "120", runs] = process.argv.slice(2);
const done = (state) => runs === undefined
  ? state.status === "finished" || state.status.startsWith("error")
  : state.runsEnded >= Number(runs);
const browser = await launchBrowser();
try {
  const page = await browser.newPage();
  await page.goto(url, { waitUntil: "domcontentloaded" });
  await page.waitForFunction(() => typeof window.viewerState === "function");
  process.stdout.write(JSON.stringify({ ready: true }) + "\n");
  const deadline = Date.now() + Number(timeoutS) * 1000;
  let state = await page.evaluate(() => window.viewerState());
  while (!done(state) && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 200));
    state = await page.evaluate(() => window.viewerState());
  }
  state.rendered = await page.evaluate(() => document.getElementById("blocks").innerText.length);
  process.stdout.write(JSON.stringify(state) + "\n");
} finally {
  await browser.close();
}
