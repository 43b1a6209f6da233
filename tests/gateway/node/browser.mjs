// The headless Chromium the gateway tests drive: @sparticuz/chromium's headless shell (or the one CHROMIUM names)
// under puppeteer-core, both from the pinned packages scripts/install-tools.sh put where GATEWAY_NODE_MODULES names.
import { createRequire } from "node:module";

const require = createRequire(process.env.GATEWAY_NODE_MODULES + "/");
const puppeteer = require("puppeteer-core");
const chromium = require("@sparticuz/chromium");

export async function launchBrowser() {
  return puppeteer.launch({
    executablePath: process.env.CHROMIUM ?? await chromium.executablePath(),
    headless: "shell",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"],
  });
}
