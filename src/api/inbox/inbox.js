// The unread web inbox, built on the TypeScript client (@unread/client, served as ES modules at /client/): one
// user's counts, live from GET /v1/users/{id}/stream (watch: resume, backoff, version order, no retry on a refused
// token), marked read through the write gateway (Gateway: an Idempotency-Key per call). Lists are updated in place,
// keyed by id, so that a live update never takes the keyboard focus away.
import { Gateway, tokenExpiry, watch } from "/client/index.js";

const $ = (id) => document.getElementById(id);
let user = "", current = null, gateway = null;
const shown = (n) => (n > 99 ? "99+" : String(n));
const status = (text) => { $("status").textContent = text; };
const plural = (n, one, many) => shown(n) + " " + (n === 1 ? one : many);

async function post(call) {
  try {
    await call(gateway);
  } catch (e) {
    status("could not mark: " + (e.status ? e.status + " " : "") + e.message);
  }
}

/** Puts `items` ({key, make, update}) in `list` in order, reusing the element of each key already there. */
function sync(list, items) {
  const existing = new Map([...list.children].map((li) => [li.dataset.key, li]));
  const keys = new Set(items.map((i) => i.key));
  for (const [key, li] of existing) if (!keys.has(key)) li.remove();
  items.forEach((item, i) => {
    let li = existing.get(item.key);
    if (!li) {
      li = item.make();
      li.dataset.key = item.key;
    }
    item.update(li);
    if (list.children[i] !== li) list.insertBefore(li, list.children[i] ?? null);
  });
}

/** A row: a main button (`data-{kind}` = label) that runs `onClick`, and an optional small button. */
function buttonRow(kind, label, onClick, extra) {
  const li = document.createElement("li");
  const b = document.createElement("button");
  b.type = "button";
  b.dataset[kind] = label;
  const name = document.createElement("span");
  name.textContent = label;
  b.append(name, document.createElement("span"));
  b.addEventListener("click", onClick);
  li.append(b);
  if (extra) li.append(extra);
  return li;
}

function badge(n, label) {
  const s = document.createElement("span");
  s.className = "badge";
  s.dataset.count = String(n);
  s.textContent = shown(n);
  s.setAttribute("aria-label", label);
  return s;
}

function span(className, text, data) {
  const s = document.createElement("span");
  s.className = className;
  s.textContent = text;
  Object.assign(s.dataset, data || {});
  return s;
}

/** Sets a row's main button: its right-hand side, its label for screen readers, its classes. */
function fill(li, right, label, muted) {
  const b = li.firstElementChild;
  b.lastElementChild.replaceChildren(...right);
  b.setAttribute("aria-label", label);
  b.classList.toggle("muted", !!muted);
  return b;
}

function renderConversations(view) {
  const ids = Object.keys(view.conversations).sort();
  sync($("conversations"), ids.map((id) => ({
    key: id,
    make: () => {
      const mark = document.createElement("button");
      mark.type = "button";
      mark.className = "mark";
      mark.dataset.markUnread = id;
      mark.addEventListener("click", () => {
        const c = current && current.counts && current.counts.conversations[id];
        post((g) => g.markUnread(user, id, c && c.marked_unread ? { marked: false } : {}));
      });
      // A click reads the conversation and sees its new reactions (every reaction so far).
      return buttonRow("conversation", id, () => {
        const c = current && current.counts && current.counts.conversations[id];
        post((g) => g.read(user, id));
        if (c && c.reactions) post((g) => g.readReactions(user, id));
      }, mark);
    },
    update: (li) => {
      const c = view.conversations[id];
      const right = [];
      if (c.mentions) right.push(span("mention", "@" + shown(c.mentions) + " "));
      if (c.reactions) right.push(span("reactions", "♥" + shown(c.reactions) + " ", { reactions: String(c.reactions) }));
      // "Jump to the first unread": where the "new messages" divider goes.
      if (c.first_unread != null) right.push(span("first", "from #" + c.first_unread + " ", { firstUnread: String(c.first_unread) }));
      if (c.marked_unread) right.push(span("dot", "", { on: "true" }), " ");
      right.push(badge(c.unread, c.unread + " unread"));
      const label = id + ": " + c.unread + " unread, " + c.mentions + " mentions" + (c.muted ? ", muted" : "") +
        (c.marked_unread ? ", marked unread" : "") + (c.reactions ? ", " + c.reactions + " reacted" : "") +
        (c.first_unread != null ? ", first unread " + c.first_unread : "");
      fill(li, right, label, c.muted).dataset.marked = String(!!c.marked_unread);
      const mark = li.lastElementChild;
      mark.textContent = c.marked_unread ? "Unmark" : "Mark unread";
      mark.setAttribute("aria-label", (c.marked_unread ? "unmark " : "mark unread ") + id);
    },
  })));
}

// Contract v4: the followed threads with unread, newest root first in each conversation; a click reads the thread.
function renderThreads(view) {
  const items = [];
  for (const cid of Object.keys(view.threads || {}).sort()) {
    for (const root of Object.keys(view.threads[cid]).map(Number).sort((a, b) => b - a)) {
      const label = cid + " › #" + root;
      items.push({
        key: label,
        make: () => buttonRow("thread", label, () => post((g) => g.readThread(user, cid, root))),
        update: (li) => {
          const t = view.threads[cid][root];
          const right = t.mentions ? [span("mention", "@" + shown(t.mentions) + " ")] : [];
          right.push(badge(t.unread, t.unread + " unread replies"));
          const muted = view.conversations[cid] && view.conversations[cid].muted;
          fill(li, right, label + ": " + t.unread + " unread replies, " + t.mentions + " mentions", muted);
        },
      });
    }
  }
  sync($("threads"), items);
  setBadge($("threads-badge"), view.unread_threads, "threads with unread replies: " + view.unread_threads);
  const rt = $("reactions-total");
  rt.dataset.count = String(view.total_reactions);
  rt.textContent = view.total_reactions ? "♥" + plural(view.total_reactions, "new reaction", "new reactions") : "";
}

function renderTeams(view) {
  sync($("teams"), Object.keys(view.teams || {}).sort().map((id) => ({
    key: id,
    // A summary, not an action: a plain row.
    make: () => {
      const li = document.createElement("li");
      li.className = "summary";
      li.dataset.team = id;
      li.append(span("", id), document.createElement("span"));
      return li;
    },
    update: (li) => {
      const t = view.teams[id];
      li.lastElementChild.replaceChildren(t.mentions ? "@" + shown(t.mentions) + " " : "", badge(t.unread, t.unread + " unread"));
      li.setAttribute("aria-label", id + ": " + t.unread + " unread in " + t.unread_conversations + " conversations, " +
        t.mentions + " mentions");
    },
  })));
}

function renderNotifications(view) {
  sync($("notifications"), Object.keys(view.notifications).sort().map((cat) => ({
    key: cat,
    make: () => buttonRow("category", cat, () => post((g) => g.notificationsRead(user, cat))),
    update: (li) => {
      const n = view.notifications[cat];
      fill(li, [n.unseen ? n.unseen + " new · " : "", badge(n.unread, n.unread + " unread")],
        cat + ": " + n.unread + " unread, " + n.unseen + " unseen");
    },
  })));
  setBadge($("notifications-badge"), view.total_notifications_unread);
}

function renderBroadcasts(view) {
  sync($("broadcasts"), Object.keys(view.broadcasts).sort().map((id) => ({
    key: id,
    make: () => buttonRow("broadcast", id, () => post((g) => g.readBroadcast(user, id))),
    update: (li) => {
      const b = view.broadcasts[id];
      fill(li, [span("dot", "", { on: String(b.dot) })], id + (b.dot ? ": new" : ": nothing new"));
    },
  })));
}

function setBadge(b, n, label) {
  b.dataset.count = String(n);
  b.textContent = shown(n);
  if (label) b.setAttribute("aria-label", label);
}

function render(view) {
  const total = view.total_unread;
  setBadge($("badge"), total, "unread messages: " + total);
  document.title = (total ? "(" + shown(total) + ") " : "") + "unread inbox";
  renderConversations(view);
  renderThreads(view);
  renderTeams(view);
  const feed = $("feed");
  feed.dataset.count = String(view.feed_unread);
  feed.textContent = plural(view.feed_unread, "new post", "new posts");
  renderNotifications(view);
  renderBroadcasts(view);
  $("inbox").hidden = false;
}

function showStatus(w, token, s, reason) {
  if (w !== current) return;
  if (s === "connecting") status("Connecting…");
  else if (s === "live") status("Live: " + user);
  else if (s === "reconnecting") status("Reconnecting…");
  else if (s === "unauthorized") {
    const expired = (tokenExpiry(token) ?? Infinity) < Date.now();
    status((expired ? "Your token expired" : reason === "forbidden" ? "This token may not read " + user
      : "The token was refused") + ": enter a valid one to go on.");
  }
}

// One watch at a time: switching users closes the old one for good before the new one opens.
function open(u, t) {
  if (current) current.close();
  user = u;
  const token = t || undefined;
  gateway = new Gateway({ token });
  for (const id of ["conversations", "threads", "teams", "notifications", "broadcasts"]) $(id).replaceChildren();
  history.replaceState(null, "", "#" + new URLSearchParams(t ? { user: u, token: t } : { user: u }));
  const w = watch(u, { token });
  current = w;
  w.on("status", (s, reason) => showStatus(w, token, s, reason));
  w.on("counts", (view) => { if (w === current) render(view); });
  status("Connecting…");
}

$("pick").addEventListener("submit", (e) => {
  e.preventDefault();
  open($("user").value.trim(), $("token").value.trim());
});
$("feed").addEventListener("click", () => post((g) => g.readFeed(user)));
$("read-all").addEventListener("click", () => post((g) => g.readAll(user)));
$("seen-all").addEventListener("click", () => post((g) => g.notificationsSeen(user)));
const start = new URLSearchParams(location.hash.slice(1));
if (start.get("user")) {
  $("user").value = start.get("user");
  $("token").value = start.get("token") || "";
  open(start.get("user"), start.get("token") || "");
}
