// Runs the official @ag-ui/client HttpAgent for each job of a JSON file and prints one JSON line per job:
// {"label", "ok", "error", "messages"}. A job is {"label", "url", "threadId", "runId", "headers"} (POST to the
// gateway), or {"label", "reference": "<file of AG-UI event JSON lines>", "threadId", "runId"} (the same client fed
// the reference conversion of the whole run as an SSE body, through HttpAgent's own fetch hook).
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

import { reportEach } from "./jobs.mjs";

const require = createRequire(process.env.GATEWAY_NODE_MODULES + "/");
const { HttpAgent } = require("@ag-ui/client");

function referenceFetch(path) {
  const lines = readFileSync(path, "utf8").split("\n").filter((line) => line.trim());
  const body = lines.map((line) => `data: ${line}\n\n`).join("");
  return async () => new Response(body, { status: 200, headers: { "Content-Type": "text/event-stream" } });
}

async function runJob(job) {
  const options = { url: job.url ?? "http://reference.invalid/run", threadId: job.threadId, headers: job.headers ?? {} };
  if (job.reference) options.fetch = referenceFetch(job.reference);
  const agent = new HttpAgent(options);
  try {
    await agent.runAgent({ runId: job.runId });
    return { label: job.label, ok: true, messages: agent.messages };
  } catch (error) {
    return { label: job.label, ok: false, error: String(error?.message ?? error), messages: agent.messages };
  }
}

await reportEach(runJob);
