// The unread web inbox: one user's counts, live from GET /v1/users/{id}/stream (a WebSocket), marked read
// through the write gateway. Messages carry values and a version: a state replaces, newer changes apply,
// older or repeated ones are dropped (docs/api.md, Stream).
"use strict";
const $ = (id) => document.getElementById(id);
let user = "", token = "", view = null, version = 0, socket = null;

const path = (rest) => "/v1/users/" + encodeURIComponent(user) + rest;
const shown = (n) => (n > 99 ? "99+" : String(n));
const status = (text) => { $("status").textContent = text; };

async function post(rest, body) {
  const headers = { "content-type": "application/json" };
  if (token) headers.authorization = "Bearer " + token;
  const r = await fetch(path(rest), { method: "POST", headers, body: body ? JSON.stringify(body) : "" });
  if (!r.ok) status("could not mark: " + r.status + " " + (await r.text()));
}

// One socket at a time: a socket that is no longer the current one (the user was switched) never reconnects. A
// socket that closes before it opened may carry a refused token: the read route says, and a 401 or 403 stops
// (no retry loop). Otherwise it reconnects with exponential backoff and jitter, 1 s doubling to 10 s.
let retries = 0;
function connect() {
  const q = [];
  if (token) q.push("access_token=" + encodeURIComponent(token));
  if (version) q.push("since=" + version);
  const scheme = location.protocol === "https:" ? "wss://" : "ws://";
  const s = new WebSocket(scheme + location.host + path("/stream") + (q.length ? "?" + q.join("&") : ""));
  let opened = false;
  socket = s;
  s.onopen = () => { opened = true; retries = 0; status("Live: " + user); };
  s.onmessage = (e) => apply(JSON.parse(e.data));
  s.onclose = () => { if (socket === s) (opened ? reconnect(s) : refusedOrReconnect(s)); };
}

async function refusedOrReconnect(s) {
  const headers = token ? { authorization: "Bearer " + token } : {};
  const r = await fetch(path("/unread"), { headers }).catch(() => null);
  if (socket !== s) return;
  if (r && (r.status === 401 || r.status === 403)) ended("token_refused");
  else reconnect(s);
}

function reconnect(s) {
  const delay = Math.min(10000, 1000 * 2 ** retries) * (0.5 + Math.random() / 2);
  retries += 1;
  status("Reconnecting…");
  setTimeout(() => { if (socket === s) connect(); }, delay);
}

// The server ended the stream for its token, or refused the token: say so, and stop (a fresh token reconnects).
function ended(reason) {
  socket = null;
  const why = { token_expired: "Your token expired", token_refused: "The token was refused" }[reason];
  status(why ? why + ": enter a valid one to go on." : "Stopped: " + reason + ".");
}

function apply(m) {
  if (m.type === "closing") {
    ended(m.reason);
    return;
  }
  if (m.type === "state") {
    view = m.state; version = m.version;
  } else if (m.type === "changes" && m.version > version && view) {
    if (m.totals) Object.assign(view, m.totals);
    for (const part of ["conversations", "broadcasts", "notifications", "threads", "teams"]) {
      for (const [id, v] of Object.entries(m[part] || {})) {
        if (v === null) delete view[part][id]; else view[part][id] = v;
      }
    }
    version = m.version;
  } else {
    return;
  }
  render();
}

function row(list, key, label, right, onClick, extra, more) {
  const li = document.createElement("li");
  const b = document.createElement("button");
  b.type = "button";
  b.dataset[key] = label;
  b.setAttribute("aria-label", extra);
  const name = document.createElement("span");
  name.textContent = label;
  b.append(name, right);
  b.addEventListener("click", onClick);
  li.append(b);
  if (more) li.append(more);
  list.append(li);
  return b;
}

// The small button beside a conversation: marks it unread (contract v3), or takes the mark away.
function markButton(id, c) {
  const m = document.createElement("button");
  m.type = "button";
  m.className = "mark";
  m.dataset.markUnread = id;
  m.textContent = c.marked_unread ? "Unmark" : "Mark unread";
  m.setAttribute("aria-label", (c.marked_unread ? "unmark " : "mark unread ") + id);
  m.addEventListener("click", () =>
    post("/conversations/" + encodeURIComponent(id) + "/mark-unread", c.marked_unread ? { marked: false } : {}));
  return m;
}

function badge(n, label) {
  const s = document.createElement("span");
  s.className = "badge";
  s.dataset.count = String(n);
  s.textContent = shown(n);
  s.setAttribute("aria-label", label);
  return s;
}

function renderConversations() {
  const list = $("conversations");
  list.replaceChildren();
  const ids = Object.keys(view.conversations).sort((a, b) =>
    view.conversations[b].unread - view.conversations[a].unread || a.localeCompare(b));
  for (const id of ids) {
    const c = view.conversations[id];
    const right = document.createElement("span");
    if (c.mentions) {
      const m = document.createElement("span");
      m.className = "mention";
      m.textContent = "@" + shown(c.mentions) + " ";
      right.append(m);
    }
    if (c.reactions) {
      const r = document.createElement("span");
      r.className = "reactions";
      r.dataset.reactions = String(c.reactions);
      r.textContent = "♥" + shown(c.reactions) + " ";
      right.append(r);
    }
    if (c.first_unread != null) {
      // "Jump to the first unread": where the "new messages" divider goes.
      const f = document.createElement("span");
      f.className = "first";
      f.dataset.firstUnread = String(c.first_unread);
      f.textContent = "from #" + c.first_unread + " ";
      right.append(f);
    }
    if (c.marked_unread) {
      const dot = document.createElement("span");
      dot.className = "dot";
      dot.dataset.on = "true";
      right.append(dot, " ");
    }
    right.append(badge(c.unread, c.unread + " unread"));
    const b = row(list, "conversation", id, right, () => post("/conversations/" + encodeURIComponent(id) + "/read"),
      id + ": " + c.unread + " unread, " + c.mentions + " mentions" + (c.muted ? ", muted" : "") +
        (c.marked_unread ? ", marked unread" : "") + (c.reactions ? ", " + c.reactions + " reacted" : "") +
        (c.first_unread != null ? ", first unread " + c.first_unread : ""), markButton(id, c));
    b.dataset.marked = String(!!c.marked_unread);
    if (c.muted) b.classList.add("muted");
  }
}

// Contract v4: the followed threads with unread, newest root first in each conversation; a click reads the thread.
function renderThreads() {
  const list = $("threads");
  list.replaceChildren();
  for (const cid of Object.keys(view.threads).sort()) {
    const roots = Object.keys(view.threads[cid]).map(Number).sort((a, b) => b - a);
    for (const root of roots) {
      const t = view.threads[cid][root];
      const right = document.createElement("span");
      if (t.mentions) {
        const m = document.createElement("span");
        m.className = "mention";
        m.textContent = "@" + shown(t.mentions) + " ";
        right.append(m);
      }
      right.append(badge(t.unread, t.unread + " unread replies"));
      const label = cid + " › #" + root;
      const b = row(list, "thread", label, right,
        () => post("/conversations/" + encodeURIComponent(cid) + "/threads/" + root + "/read"),
        label + ": " + t.unread + " unread replies, " + t.mentions + " mentions");
      if (view.conversations[cid] && view.conversations[cid].muted) b.classList.add("muted");
    }
  }
  const tb = $("threads-badge");
  tb.dataset.count = String(view.unread_threads);
  tb.textContent = shown(view.unread_threads);
  tb.setAttribute("aria-label", "threads with unread replies: " + view.unread_threads);
  const rt = $("reactions-total");
  rt.dataset.count = String(view.total_reactions);
  rt.textContent = view.total_reactions ? "♥" + shown(view.total_reactions) + " new reactions" : "";
}

function renderTeams() {
  const list = $("teams");
  list.replaceChildren();
  for (const [id, t] of Object.entries(view.teams || {})) {
    const right = document.createElement("span");
    right.textContent = t.mentions ? "@" + shown(t.mentions) + " " : "";
    right.append(badge(t.unread, t.unread + " unread"));
    // A summary, not an action: a plain row.
    const li = document.createElement("li");
    li.className = "summary";
    li.dataset.team = id;
    li.setAttribute("aria-label", id + ": " + t.unread + " unread in " + t.unread_conversations + " conversations, " +
      t.mentions + " mentions");
    const name = document.createElement("span");
    name.textContent = id;
    li.append(name, right);
    list.append(li);
  }
}

function renderNotifications() {
  const list = $("notifications");
  list.replaceChildren();
  for (const [cat, n] of Object.entries(view.notifications)) {
    const right = document.createElement("span");
    right.textContent = n.unseen ? n.unseen + " new · " : "";
    right.append(badge(n.unread, n.unread + " unread"));
    row(list, "category", cat, right, () => post("/notifications/read", { category: cat }),
      cat + ": " + n.unread + " unread, " + n.unseen + " unseen");
  }
  const nb = $("notifications-badge");
  nb.dataset.count = String(view.total_notifications_unread);
  nb.textContent = shown(view.total_notifications_unread);
}

function renderBroadcasts() {
  const list = $("broadcasts");
  list.replaceChildren();
  for (const [id, b] of Object.entries(view.broadcasts)) {
    const dot = document.createElement("span");
    dot.className = "dot";
    dot.dataset.on = String(b.dot);
    row(list, "broadcast", id, dot, () => post("/broadcasts/" + encodeURIComponent(id) + "/read"),
      id + (b.dot ? ": new" : ": nothing new"));
  }
}

function render() {
  const total = view.total_unread;
  const b = $("badge");
  b.dataset.count = String(total);
  b.textContent = shown(total);
  b.setAttribute("aria-label", "unread messages: " + total);
  document.title = (total ? "(" + shown(total) + ") " : "") + "unread inbox";
  renderConversations();
  const feed = $("feed");
  feed.dataset.count = String(view.feed_unread);
  feed.textContent = shown(view.feed_unread) + " new posts";
  renderThreads();
  renderTeams();
  renderNotifications();
  renderBroadcasts();
  $("inbox").hidden = false;
}

function open(u, t) {
  const old = socket;
  socket = null;
  if (old) old.close();
  user = u; token = t; view = null; version = 0; retries = 0;
  history.replaceState(null, "", "#" + new URLSearchParams(t ? { user: u, token: t } : { user: u }));
  status("Connecting…");
  connect();
}

$("pick").addEventListener("submit", (e) => {
  e.preventDefault();
  open($("user").value.trim(), $("token").value.trim());
});
$("feed").addEventListener("click", () => post("/feed/read"));
$("read-all").addEventListener("click", () => post("/read-all"));
$("seen-all").addEventListener("click", () => post("/notifications/seen"));
const start = new URLSearchParams(location.hash.slice(1));
if (start.get("user")) {
  $("user").value = start.get("user");
  $("token").value = start.get("token") || "";
  open(start.get("user"), start.get("token") || "");
}
