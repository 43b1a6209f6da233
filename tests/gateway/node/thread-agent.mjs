// Runs the thread agent of docs/gateway.md (compiled from its TypeScript by the test) for each job of a JSON file and
// prints one JSON line per job: {"label", "ok", "error", "messages", "runs"}. A job is {"label", "module" (the
// compiled example), "gateway", "threadId", "token", "follow"}: without follow, openThread() resolves once the
// stream ended; with "stopAfterRuns": N, the agent is aborted once N runs ended, as a page that navigates away.
import { reportEach } from "./jobs.mjs";

async function runJob(job) {
  const { ThreadAgent, openThread } = await import(job.module);
  let runs = 0;
  if (job.stopAfterRuns === undefined) {
    try {
      const agent = await openThread(job.gateway, job.threadId, job.token, job.follow);
      return { label: job.label, ok: true, messages: agent.messages };
    } catch (error) {
      return { label: job.label, ok: false, error: String(error?.message ?? error), messages: [] };
    }
  }
  const agent = new ThreadAgent({
    url: `${job.gateway}/threads/${encodeURIComponent(job.threadId)}/connect?follow=true`,
    threadId: job.threadId,
    headers: { Authorization: `Bearer ${job.token}` },
  });
  const ended = () => {  // the abort itself ends the stream with a RUN_ERROR of the client's: not counted
    if (runs < job.stopAfterRuns && ++runs === job.stopAfterRuns) agent.abortRun();
  };
  try {
    await agent.connectAgent({}, { onRunFinishedEvent: ended, onRunErrorEvent: ended });
    return { label: job.label, ok: true, runs, messages: agent.messages };
  } catch (error) {
    return { label: job.label, ok: false, runs, error: String(error?.message ?? error), messages: agent.messages };
  }
}

await reportEach(runJob);
