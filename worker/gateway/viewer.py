"""The viewer page: one self-contained HTML document (no build step, no CDN) that follows a run (`/view/{run}`) or a
whole thread, run after run (`/view/threads/{thread}`), with EventSource and shows its messages, reasoning and tool
calls as they grow; `window.viewerState()` reports what it shows."""

from __future__ import annotations

__all__ = ["VIEWER_PAGE"]

VIEWER_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>AG-UI run viewer</title>
<style>
  body { font: 14px/1.45 system-ui, sans-serif; margin: 0; background: #f6f7f9; color: #1d2330; }
  header { position: sticky; top: 0; background: #1d2330; color: #fff; padding: .6em 1em; display: flex; gap: 1em; }
  header code { color: #9fd3ff; }
  #status { margin-left: auto; }
  main { max-width: 60em; margin: 1em auto; padding: 0 1em; }
  .block { background: #fff; border-radius: 6px; padding: .6em .8em; margin: .5em 0; border-left: 4px solid #8a94a6; }
  .block .who { font-size: 12px; color: #5b6475; text-transform: uppercase; letter-spacing: .04em; }
  .block pre { white-space: pre-wrap; word-break: break-word; margin: .3em 0 0; font: inherit; }
  .user { border-color: #2f80ed; } .assistant { border-color: #27ae60; }
  .reasoning { border-color: #b48ade; color: #4a4160; } .tool { border-color: #f2994a; }
  .tool pre.args, .tool pre.result { font: 12px/1.4 ui-monospace, monospace; background: #f3f4f6; padding: .4em; }
  .open::after { content: " \\25CF"; color: #27ae60; }
</style>
</head>
<body>
<header><span><span id="kind">run</span> <code id="run"></code></span><span id="status">connecting</span></header>
<main id="blocks"></main>
<script>
"use strict";
const runId = decodeURIComponent(location.pathname.split("/").pop());
const threadMode = location.pathname.includes("/view/threads/");  // the thread's runs, one after another
const token = new URLSearchParams(location.search).get("token");
document.getElementById("run").textContent = runId;
if (threadMode) document.getElementById("kind").textContent = "thread";
const blocksEl = document.getElementById("blocks");
const statusEl = document.getElementById("status");
let state = { status: "connecting", order: [], items: {}, lastSeq: null, lastId: null, reconnects: 0, events: 0,
              runsEnded: 0 };
let source = null;

function item(id, kind, role) {
  let it = state.items[id];
  if (!it) {
    it = { id, kind, role: role || kind, text: "", name: "", args: "", result: null, open: true };
    state.items[id] = it;
    state.order.push(id);
  }
  return it;
}

function fromSnapshot(messages) {
  state.order = []; state.items = {};
  for (const m of messages) {
    if (m.role === "tool") {
      const call = state.items[m.toolCallId] || item(m.toolCallId, "tool", "tool");
      call.result = typeof m.content === "string" ? m.content : JSON.stringify(m.content);
      call.open = false;
      continue;
    }
    if (typeof m.content === "string" && (m.content || !m.toolCalls)) {
      const it = item(m.id, m.role === "reasoning" ? "reasoning" : "message", m.role);
      it.text = m.content; it.open = false;
    }
    for (const c of m.toolCalls || []) {
      const call = item(c.id, "tool", "tool");
      call.name = c.function.name; call.args = c.function.arguments; call.open = false;
    }
  }
}

function apply(ev) {
  switch (ev.type) {
    case "RUN_STARTED": state.status = "running"; break;
    case "MESSAGES_SNAPSHOT": fromSnapshot(ev.messages); break;
    case "TEXT_MESSAGE_START": item(ev.messageId, "message", ev.role).open = true; break;
    case "REASONING_MESSAGE_START": item(ev.messageId, "reasoning", "reasoning").open = true; break;
    case "TEXT_MESSAGE_CONTENT": item(ev.messageId, "message", "assistant").text += ev.delta; break;
    case "REASONING_MESSAGE_CONTENT": item(ev.messageId, "reasoning", "reasoning").text += ev.delta; break;
    case "TEXT_MESSAGE_END": case "REASONING_MESSAGE_END":
      if (state.items[ev.messageId]) state.items[ev.messageId].open = false; break;
    case "TOOL_CALL_START": {
      const c = item(ev.toolCallId, "tool", "tool"); c.name = ev.toolCallName; c.open = true; break;
    }
    case "TOOL_CALL_ARGS": item(ev.toolCallId, "tool", "tool").args += ev.delta; break;
    case "TOOL_CALL_END": item(ev.toolCallId, "tool", "tool").open = false; break;
    case "TOOL_CALL_RESULT": {
      const c = item(ev.toolCallId, "tool", "tool");
      c.result = typeof ev.content === "string" ? ev.content : JSON.stringify(ev.content); c.open = false; break;
    }
    case "RUN_FINISHED": state.status = "finished"; state.runsEnded++; break;
    case "RUN_ERROR": state.status = "error: " + (ev.message || ev.code || ""); state.runsEnded++; break;
  }
}

function render() {
  statusEl.textContent = state.status + (state.reconnects ? " (reconnected " + state.reconnects + "x)" : "");
  const frag = document.createDocumentFragment();
  for (const id of state.order) {
    const it = state.items[id];
    const div = document.createElement("div");
    div.className = "block " + (it.kind === "tool" ? "tool" : it.kind === "reasoning" ? "reasoning" : it.role);
    const who = document.createElement("div");
    who.className = "who" + (it.open ? " open" : "");
    who.textContent = it.kind === "tool" ? "tool " + it.name : it.role;
    div.appendChild(who);
    const parts = it.kind === "tool" ? [["args", it.args], ["result", it.result]] : [["text", it.text]];
    for (const [cls, text] of parts) {
      if (text === null || text === "") continue;
      const pre = document.createElement("pre");
      pre.className = cls; pre.textContent = text; div.appendChild(pre);
    }
    frag.appendChild(div);
  }
  blocksEl.replaceChildren(frag);
}

let pending = false;
function schedule() { if (!pending) { pending = true; requestAnimationFrame(() => { pending = false; render(); }); } }

function connect() {
  const query = new URLSearchParams();
  if (token) query.set("token", token);
  if (threadMode ? state.lastId !== null : state.lastSeq !== null) {
    query.set("after", threadMode ? state.lastId : String(state.lastSeq));
  }
  const qs = query.toString();
  const path = threadMode ? "../../threads/" : "../runs/";
  source = new EventSource(path + encodeURIComponent(runId) + "/events" + (qs ? "?" + qs : ""));
  source.onopen = () => {
    if (state.status === "connecting" || state.status === "reconnecting") state.status = "running";
    schedule();
  };
  source.onmessage = (msg) => {
    if (threadMode) {  // the gateway sends each event of the thread once, under its run's own id
      if (msg.lastEventId) state.lastId = msg.lastEventId;
      state.events++;
      apply(JSON.parse(msg.data));
      schedule();
      return;
    }
    if (msg.lastEventId) {
      const seq = Number(msg.lastEventId.slice(msg.lastEventId.lastIndexOf(":") + 1));
      if (state.lastSeq !== null && seq <= state.lastSeq && msg.data.indexOf('"MESSAGES_SNAPSHOT"') < 0) return;
      state.lastSeq = seq;
    }
    state.events++;
    const ev = JSON.parse(msg.data);
    apply(ev);
    if (ev.type === "RUN_FINISHED" || ev.type === "RUN_ERROR") source.close();
    schedule();
  };
  source.onerror = () => {
    if (!threadMode && (state.status === "finished" || state.status.startsWith("error"))) return;
    state.status = "reconnecting"; state.reconnects++;
    if (source.readyState === EventSource.CLOSED) setTimeout(connect, 3000);  // refused: try again by ourselves
    schedule();
  };
}

window.viewerState = () => ({
  status: state.status, reconnects: state.reconnects, lastSeq: state.lastSeq, events: state.events,
  lastId: state.lastId, runsEnded: state.runsEnded,
  items: state.order.map((id) => { const it = state.items[id]; return { id, kind: it.kind, role: it.role,
    text: it.text, name: it.name, args: it.args, result: it.result }; }),
});
connect();
</script>
</body>
</html>
"""
