// Opens the gateway's viewer page in headless Chromium (@sparticuz/chromium's headless shell, or the one CHROMIUM
// names, driven by puppeteer-core) and prints its state as JSON lines: "ready" once the page runs, then its final
// state once the run finished (or after the timeout in seconds, argv[3]); with argv[4], a thread page's state once
// that many of its runs ended.
import { createRequire } from "node:module";

const require = createRequire(process.env.GATEWAY_NODE_MODULES + "/");
const puppeteer = require("puppeteer-core");
const chromium = require("@sparticuz/chromium");

const [url, timeoutS = "120", runs] = process.argv.slice(2);
const done = (state) => runs === undefined
  ? state.status === "finished" || state.status.startsWith("error")
  : state.runsEnded >= Number(runs);
const browser = await puppeteer.launch({
  executablePath: process.env.CHROMIUM ?? await chromium.executablePath(),
  headless: "shell",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"],
});
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
