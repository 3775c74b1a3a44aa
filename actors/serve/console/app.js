// The session-actors console: plain DOM, no build step, nothing loaded from elsewhere.
// Every value from the server is set with textContent (never parsed as HTML).
"use strict";

const state = { token: sessionStorage.getItem("sa-token") || "", picked: null, next: null, tab: "transcript", timer: null };

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value; else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

function svg(tag, attrs = {}) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  return node;
}

function when(epoch) { return epoch ? new Date(epoch * 1000).toISOString().replace("T", " ").slice(0, 19) : ""; }

function say(text, bad = false) {
  const status = document.getElementById("status");
  status.textContent = text;
  status.className = bad ? "error" : "";
}

async function api(path) {
  const headers = state.token ? { Authorization: "Bearer " + state.token } : {};
  const response = await fetch("/v1" + path, { headers });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error + ": " + body.message);
  return body;
}

// -- sessions ---------------------------------------------------------------------

async function loadSessions(more = false) {
  const query = new URLSearchParams({ limit: "50" });
  const source = document.getElementById("f-source").value.trim();
  const meta = document.getElementById("f-meta").value.trim();
  const live = document.getElementById("f-live").value;
  if (source) query.set("source", source);
  if (live) query.set("live", live);
  if (meta.includes("=")) query.set("meta." + meta.split("=", 1)[0], meta.slice(meta.indexOf("=") + 1));
  if (more && state.next) query.set("after", state.next);
  try {
    const page = await api("/sessions?" + query);
    const body = document.querySelector("#sessions tbody");
    if (!more) body.replaceChildren();
    for (const info of page.sessions) {
      // one row per conversation: a session a compaction rotated away from lives on in its
      // continuation's row (its lineage tab shows every rotation)
      if (info.end_reason === "compression") continue;
      const name = el("td", {}, info.id);
      if (info.branch_of) {
        const [from, seq] = info.branch_of;
        const link = el("a", { href: "?session=" + encodeURIComponent(from), class: "branch-of" }, `branch of ${from} @ #${seq}`);
        link.addEventListener("click", (event) => { event.preventDefault(); event.stopPropagation(); pickId(from); });
        name.append(el("br"), link);
      } else if (info.parent_session_id) {
        name.append(el("br"), el("span", { class: "rotated" }, "continues " + info.parent_session_id));
      }
      const row = el("tr", { class: "session", "data-id": info.id },
        name, el("td", {}, info.source),
        el("td", {}, info.live ? "live" : "ended: " + info.end_reason), el("td", {}, when(info.created_at)));
      row.addEventListener("click", () => pick(info.id, row));
      body.append(row);
    }
    state.next = page.next;
    document.getElementById("more").hidden = !page.next;
    say(body.children.length + " sessions");
  } catch (error) { say(error.message, true); }
}

function pickId(id) {
  const row = [...document.querySelectorAll("tr.session")].find((r) => r.dataset.id === id);
  if (row) pick(id, row);
  else { state.picked = id; document.getElementById("detail-title").textContent = id; show(state.tab); }
}

function pick(id, row) {
  document.querySelectorAll("tr.session.picked").forEach((r) => r.classList.remove("picked"));
  row.classList.add("picked");
  state.picked = id;
  document.getElementById("detail-title").textContent = id;
  show(state.tab);
}

// -- transcript -------------------------------------------------------------------

function messageBox(message) {
  const summary = message.meta && message.meta.compaction;
  const box = el("div", { class: "msg role-" + message.role + (summary ? " summary" : ""), "data-seq": message.seq },
    el("div", { class: "head" }, "#" + message.seq + " " + message.role + (message.name ? " (" + message.name + ")" : "")
      + (summary ? " · compaction summary" : "") + (message.key ? " · key " + message.key : "")
      + (message.state !== "live" ? " · " + message.state : "")));
  const content = message.content == null ? "" : typeof message.content === "string" ? message.content : JSON.stringify(message.content);
  if (content) box.append(el("div", { class: "content" }, content));
  if (message.tool_calls) {
    for (const call of message.tool_calls) {
      const fn = call.function || {};
      box.append(el("div", { class: "call" }, "→ " + (fn.name || call.type || "call") + "(" + (fn.arguments || "") + ")"));
    }
  }
  return box;
}

// A user message starts a turn; an assistant's tool calls and the tool results after
// them are one tool run, drawn as one group.
function transcriptView(messages) {
  const view = el("div", { id: "transcript" });
  let turn = 0, group = null;
  for (const message of messages) {
    if (message.role === "user" && !(message.meta && message.meta.synthetic)) {
      turn += 1;
      view.append(el("div", { class: "turn" }, "turn " + turn));
      group = null;
    }
    if (message.role === "assistant" && message.tool_calls) {
      group = el("div", { class: "tools" }, el("div", { class: "label" }, "tool run"));
      group.append(messageBox(message));
      view.append(group);
      continue;
    }
    if (message.role === "tool" && group) { group.append(messageBox(message)); continue; }
    group = null;
    view.append(messageBox(message));
  }
  if (!messages.length) view.append(el("p", {}, "no messages"));
  return view;
}

// -- archive --------------------------------------------------------------------

// The archive grouped by the compaction that archived each message: what its summary replaced
// (dropped from the verbatim transcript) and what it carried into the continuation verbatim.
async function archiveView(id) {
  const path = `/sessions/${encodeURIComponent(id)}`;
  const [archived, records] = await Promise.all([api(path + "/messages?archived=true"), api(path + "/compactions")]);
  const view = el("div", { id: "archive" });
  let left = archived.messages, below = 0;
  const ordered = [...records.compactions].sort((a, b) => a.watermark - b.watermark);
  for (const record of ordered) {
    const detail = await api(`/compactions/${record.id}`);
    const carried = new Set(detail.carried.map((m) => m.origin_id));
    // what the summary replaced (up to its watermark) and the tail it carried (written past it)
    const mine = left.filter((m) => m.state !== "retracted"
      && ((m.seq > below && m.seq <= record.watermark) || carried.has(m.id)));
    left = left.filter((m) => !mine.includes(m));
    below = record.watermark;
    const kept = mine.filter((m) => carried.has(m.id)).length;
    const group = el("div", { class: "archive-group", "data-compaction": record.id },
      el("h3", {}, `compaction #${record.id} (${record.mode}, ${when(record.committed_at)}): `
        + `${mine.length - kept} dropped into the summary, ${kept} carried verbatim`));
    for (const message of mine) {
      const box = messageBox(message);
      const how = carried.has(message.id) ? "carried" : "dropped";
      box.classList.add(how);
      box.querySelector(".head").append(" · " + (how === "carried" ? "carried verbatim" : "dropped (summarized)"));
      group.append(box);
    }
    view.append(group);
  }
  if (left.length) view.append(el("div", { class: "archive-group" }, el("h3", {}, "retracted and other"), ...left.map(messageBox)));
  if (!archived.messages.length) view.append(el("p", {}, "nothing archived"));
  return view;
}

// -- lineage ----------------------------------------------------------------------

function lineageView(lineage) {
  const depth = {}, rows = [];
  for (const node of lineage.sessions) {
    const parent = node.parent_session_id;
    depth[node.id] = parent in depth ? depth[parent] + 1 : 0;
    rows.push(node);
  }
  const width = 260, height = 44, gap = 22;
  const area = svg("svg", { id: "lineage-graph", width: 40 + width + 30 * Math.max(0, ...Object.values(depth)),
    height: rows.length * (height + gap) + 10 });
  const place = {};
  rows.forEach((node, index) => { place[node.id] = { x: 10 + 30 * depth[node.id], y: 5 + index * (height + gap) }; });
  for (const node of rows) {
    for (const child of node.children) {
      const a = place[node.id], b = place[child];
      area.append(svg("path", { d: `M${a.x + 15},${a.y + height} V${b.y + height / 2} H${b.x}`, fill: "none", stroke: "#8a93a3" }));
    }
  }
  for (const node of rows) {
    const at = place[node.id];
    const fill = node.live ? "#e6f4ea" : "#f1f3f4";
    const stroke = node.id === lineage.asked ? "#3367d6" : node.children.length > 1 ? "#c5221f" : "#8a93a3";
    area.append(svg("rect", { x: at.x, y: at.y, width, height, rx: 5, fill, stroke, "data-id": node.id }));
    const name = svg("text", { x: at.x + 8, y: at.y + 18 }); name.textContent = node.id;
    const what = svg("text", { x: at.x + 8, y: at.y + 35 });
    what.textContent = node.live ? "live" : "ended: " + node.end_reason;
    area.append(name, what);
  }
  const view = el("div", {}, el("p", {}, lineage.forked ? "FORKED lineage" : rows.length + " session(s), live: " + (lineage.live_id || "none")));
  view.append(area);
  return view;
}

// -- compactions ------------------------------------------------------------------

async function compactionsView(id) {
  const records = await api(`/sessions/${encodeURIComponent(id)}/compactions`);
  const view = el("div", { id: "compactions" });
  if (!records.compactions.length) view.append(el("p", {}, "no compactions"));
  for (const record of records.compactions) {
    const detail = await api(`/compactions/${record.id}`);
    const box = el("div", { class: "record" },
      el("h3", {}, `#${record.id} ${record.mode} by ${record.compressor} at ${when(record.committed_at)}`),
      el("div", {}, `${record.archived_count} archived, ${record.tail_count} carried, watermark ${record.watermark}, lease token ${record.token}`
        + (record.child_session_id ? `, continued as ${record.child_session_id}` : "")));
    box.append(el("h4", {}, "Replaced"), ...detail.replaced.map(messageBox));
    if (!detail.complete) box.append(el("p", {}, "committed before the store recorded its summary and tail"));
    box.append(el("h4", {}, "Summary"), ...detail.summary.map(messageBox));
    box.append(el("h4", {}, "Carried tail"), ...detail.carried.map(messageBox));
    view.append(box);
  }
  return view;
}

// -- search -----------------------------------------------------------------------

async function searchView() {
  const words = document.getElementById("q").value.trim();
  if (!words) return el("p", {}, "type words to search for");
  const query = new URLSearchParams({ q: words, limit: "50" });
  if (state.picked && document.getElementById("q-lineage").checked) query.set("session_id", state.picked);
  const result = await api("/search?" + query);
  const view = el("div", { id: "search-hits" }, el("p", {}, `${result.hits.length} hit(s), best first`));
  for (const hit of result.hits) {
    const row = el("div", { class: "hit" + (hit.archived ? " archived" : "") },
      el("div", { class: "meta" }, `${hit.session_id} #${hit.seq} ${hit.role} · ${hit.archived ? "archived" : "live"}`),
      el("div", { class: "snippet" }, hit.snippet));
    row.addEventListener("click", () => {
      state.picked = hit.session_id;
      document.getElementById("detail-title").textContent = hit.session_id;
      show(hit.archived ? "archive" : "transcript");
    });
    view.append(row);
  }
  return view;
}

// -- leases, turns and events ---------------------------------------------------------

function locksView(locks) {
  const table = el("table", { id: "locks" }, el("tr", {}, el("th", {}, "kind"), el("th", {}, "session"),
    el("th", {}, "holder"), el("th", {}, "token"), el("th", {}, "expires")));
  for (const lease of locks.leases) {
    table.append(el("tr", {}, el("td", {}, "compaction lease" + (lease.live ? "" : " (expired)")), el("td", {}, lease.session_id),
      el("td", {}, lease.holder), el("td", {}, lease.token), el("td", {}, when(lease.expires_at))));
  }
  for (const turn of locks.turns) {
    table.append(el("tr", {}, el("td", {}, "turn" + (turn.interrupted ? " (interrupted)" : "")), el("td", {}, turn.session_id),
      el("td", {}, turn.holder), el("td", {}, turn.token), el("td", {}, when(turn.expires_at))));
  }
  return el("div", {}, el("p", {}, `${locks.leases.length} lease(s), ${locks.turns.length} turn(s)`), table);
}

const events = [];
// The event stream, followed for as long as the page is open: cut off (a restart, a proxy, a
// network change) it reconnects, with Last-Event-ID so the events it missed come first.
const stream = { lastId: null, run: 0, controller: null };
function followEvents() {
  const run = ++stream.run;  // a new token starts a new stream; the old one stops
  if (stream.controller) stream.controller.abort();
  const controller = (stream.controller = new AbortController());
  const connect = async (delay) => {
    let opened = false;
    try {
      const headers = state.token ? { Authorization: "Bearer " + state.token } : {};
      if (stream.lastId) headers["Last-Event-ID"] = stream.lastId;
      const response = await fetch("/v1/events", { headers, signal: controller.signal });
      if (response.status === 401 || response.status === 403) return;  // the token cannot read: no retry
      if (!response.ok) throw new Error("HTTP " + response.status);
      opened = true;
      document.body.dataset.events = "open";
      const reader = response.body.getReader(), decoder = new TextDecoder();
      let buffered = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffered += decoder.decode(value, { stream: true });
        let end;
        while ((end = buffered.indexOf("\n\n")) >= 0) {
          const block = buffered.slice(0, end); buffered = buffered.slice(end + 2);
          const lines = block.split("\n");
          const id = lines.find((l) => l.startsWith("id: "));
          if (id) stream.lastId = id.slice(4);
          const data = lines.filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
          if (lines.includes("event: compaction") && data) events.unshift(JSON.parse(data));
          if (state.tab === "events") show("events");
        }
      }
    } catch (error) {
      if (controller.signal.aborted) return;
      say("event stream: " + error.message + "; reconnecting", true);
    }
    if (run !== stream.run) return;
    document.body.dataset.events = "reconnecting";
    const wait = opened ? 1000 : Math.min(delay * 2, 30000);  // back off while the server is away
    setTimeout(() => connect(wait), wait);
  };
  connect(500);
}

function eventsView() {
  const list = el("ul", { id: "events" });
  for (const outcome of events.slice(0, 200)) {
    list.append(el("li", {}, `${outcome.status} ${outcome.session_id}` + (outcome.reason ? ` (${outcome.reason})` : "")
      + ` ${outcome.messages_before} → ${outcome.messages_after} messages`));
  }
  return el("div", {}, el("p", {}, events.length + " compaction outcome(s) since this page opened"), list);
}

// -- tabs -------------------------------------------------------------------------

async function show(tab) {
  state.tab = tab;
  document.querySelectorAll("#tabs button").forEach((b) => b.classList.toggle("active", b.dataset.tab === tab));
  clearTimeout(state.timer);
  const panel = document.getElementById("panel");
  const id = state.picked, path = id && `/sessions/${encodeURIComponent(id)}`;
  try {
    let view;
    if (tab === "locks") view = locksView(await api("/locks"));
    else if (tab === "events") view = eventsView();
    else if (tab === "search") view = await searchView();
    else if (!id) view = el("p", {}, "pick a session");
    else if (tab === "transcript") view = transcriptView((await api(path + "/messages")).messages);
    else if (tab === "archive") view = await archiveView(id);
    else if (tab === "lineage") view = lineageView(await api(path + "/lineage"));
    else view = await compactionsView(id);
    panel.replaceChildren(view);
    panel.dataset.ready = tab;
  } catch (error) { panel.replaceChildren(el("p", { class: "error" }, error.message)); }
  if (tab === "transcript" || tab === "locks") state.timer = setTimeout(() => show(tab), 2000);  // live
}

// Whether the page fits its window's width (no sideways scrolling), for people and for the tests.
function measureFit() {
  document.body.dataset.fits = document.documentElement.scrollWidth <= window.innerWidth ? "yes" : "no";
}
window.addEventListener("resize", measureFit);
new MutationObserver(measureFit).observe(document.documentElement, { childList: true, subtree: true });

document.addEventListener("DOMContentLoaded", () => {
  const token = document.getElementById("token");
  const fromHash = new URLSearchParams(location.hash.slice(1)).get("token");
  if (fromHash) { state.token = fromHash; sessionStorage.setItem("sa-token", fromHash); history.replaceState(null, "", location.pathname + location.search); }
  token.value = state.token;
  document.getElementById("login").addEventListener("submit", (event) => {
    event.preventDefault();
    state.token = token.value.trim();
    sessionStorage.setItem("sa-token", state.token);
    loadSessions(); followEvents();
  });
  document.getElementById("filters").addEventListener("submit", (event) => { event.preventDefault(); loadSessions(); });
  document.getElementById("more").addEventListener("click", () => loadSessions(true));
  document.getElementById("search").addEventListener("submit", (event) => { event.preventDefault(); show("search"); });
  document.querySelectorAll("#tabs button").forEach((b) => b.addEventListener("click", () => show(b.dataset.tab)));
  const wanted = new URLSearchParams(location.search);
  loadSessions().then(() => {
    const id = wanted.get("session");
    if (wanted.get("q")) {
      document.getElementById("q").value = wanted.get("q");
      show("search");
    } else if (id) {
      state.picked = id;
      document.getElementById("detail-title").textContent = id;
      show(wanted.get("tab") || "transcript");
    }
  });
  followEvents();
});
