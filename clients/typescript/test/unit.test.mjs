// Unit tests of @unread/client on its built output (node --test): backoff, version order, token refresh, refused
// tokens, the gateway's idempotency keys. No server: fetch and WebSocket are fakes that record what they are asked.
import assert from "node:assert/strict";
import { test } from "node:test";
import { backoffDelay, Counts, Gateway, tokenExpiry, UnreadError, watch } from "../dist/index.js";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const until = async (what, done, ms = 3000) => {
  const end = Date.now() + ms;
  while (!done()) {
    if (Date.now() > end) throw new Error("timed out waiting for " + what);
    await sleep(5);
  }
};
const jwt = (claims) => "h." + Buffer.from(JSON.stringify(claims)).toString("base64url") + ".s";
const view = (total) => ({ user_id: "u", total_unread: total, conversations: { c: { unread: total, mentions: 0, muted: false } },
  broadcasts: {}, notifications: {}, threads: {}, teams: {} });

test("backoff grows from the minimum to the maximum, jittered into [half, full)", () => {
  const b = { minDelayMs: 100, maxDelayMs: 1000 };
  assert.deepEqual([0, 1, 2, 3, 4, 9].map((a) => backoffDelay(a, b, () => 0.999999)), [100, 200, 400, 800, 1000, 1000]);
  assert.deepEqual([0, 1, 5].map((a) => backoffDelay(a, b, () => 0)), [50, 100, 500]);
});

test("counts apply in version order: late and repeated changes are dropped, null takes an entry out", () => {
  const c = new Counts();
  assert.equal(c.apply({ type: "changes", version: 1, totals: {} }), "dropped", "no state yet");
  assert.equal(c.apply({ type: "state", version: 10, state: view(3) }), "state");
  assert.equal(c.apply({ type: "changes", version: 9, totals: { total_unread: 99 } }), "dropped");
  assert.equal(c.apply({ type: "changes", version: 10, totals: { total_unread: 99 } }), "dropped");
  assert.equal(c.apply({ type: "state", version: 10, state: view(99) }), "dropped", "a repeated state too");
  const t = { unread: 1, mentions: 0 };
  assert.equal(c.apply({ type: "changes", version: 12, totals: { total_unread: 0 }, conversations: { c: null },
    threads: { c: { 7: t } }, teams: { acme: { unread: 0, mentions: 0, unread_conversations: 0 } } }), "changes");
  assert.equal(c.view.total_unread, 0);
  assert.deepEqual(c.view.conversations, {});
  assert.deepEqual(c.view.threads, { c: { 7: t } });
  assert.equal(c.apply({ type: "changes", version: 13, threads: { c: null } }), "changes");
  assert.deepEqual(c.view.threads, {});
  assert.equal(c.apply({ type: "refreshed", until: 5 }), "ignored");
  assert.equal(c.version, 13);
});

/** A fetch serving Server-Sent Events: each call takes the next of `answers` (a status, or a list of messages). */
function sseFetch(answers) {
  const calls = [];
  const fetch = async (url, init) => {
    calls.push({ url: String(url), init });
    const answer = answers.shift() ?? [];
    if (typeof answer === "number") return new Response("{}", { status: answer });
    const body = answer.map((m) => ": heartbeat\n\nid: " + m.version + "\ndata: " + JSON.stringify(m) + "\n\n").join("");
    return new Response(new Blob([body]).stream(), { status: 200, headers: { "content-type": "text/event-stream" } });
  };
  return { fetch, calls };
}

test("a refused token stops the watch: unauthorized, and no retry", async () => {
  const { fetch, calls } = sseFetch([401, 401, 401]);
  const w = watch("u", { baseUrl: "http://x", token: "t", transport: "sse", fetch, minDelayMs: 1, maxDelayMs: 2 });
  await until("unauthorized", () => w.status === "unauthorized");
  await sleep(50);
  assert.equal(calls.length, 1, "one request, no retry loop");
  assert.equal(calls[0].init.headers.authorization, "Bearer t");
  w.close();
});

test("a dropped stream resumes with since after the backoff, applying only newer versions", async () => {
  const first = [{ type: "state", version: 5, state: view(2) }, { type: "changes", version: 4, totals: { total_unread: 9 } },
    { type: "changes", version: 6, totals: { total_unread: 1 } }];
  const { fetch, calls } = sseFetch([first, 503, [{ type: "changes", version: 7, totals: { total_unread: 0 } }]]);
  const w = watch("u 1", { baseUrl: "http://x", transport: "sse", fetch, minDelayMs: 5, maxDelayMs: 10 });
  const applied = [], statuses = [];
  w.on("counts", (c) => applied.push([w.version, c.total_unread]));
  w.on("status", (s) => statuses.push(s));
  await until("version 7", () => w.version === 7);
  assert.deepEqual(applied, [[5, 2], [6, 1], [7, 0]]);
  assert.equal(calls[0].url, "http://x/v1/users/u%201/stream");
  assert.match(calls[1].url, /since=6$/);
  assert.match(calls[2].url, /since=6$/);
  assert.ok(statuses.includes("reconnecting") && statuses.includes("live"), statuses.join());
  w.close();
  assert.equal(w.status, "closed");
});

/** A WebSocket fake: opens at once, records what is sent, lets the test push messages and close. */
class FakeSocket {
  static all = [];
  constructor(url) {
    this.url = url;
    this.sent = [];
    this.readyState = 0;
    FakeSocket.all.push(this);
    setTimeout(() => { this.readyState = 1; this.onopen?.(); }, 1);
  }
  send(text) { this.sent.push(JSON.parse(text)); }
  push(message) { this.onmessage?.({ data: JSON.stringify(message) }); }
  close(code = 1000) { this.readyState = 3; this.onclose?.({ code }); }
}

test("a WebSocket sends a fresh token before the current one expires, and stays open", async () => {
  FakeSocket.all = [];
  let n = 0;
  // Expiring 1-2 s ahead (exp is in whole seconds), refreshed 1.9 s before: a fresh token is at least 1 s from
  // its expiry when checked, however late in its second it was minted.
  const getToken = () => jwt({ sub: "u", exp: Math.floor(Date.now() / 1000) + 2, n: n++ });
  const w = watch("u", { baseUrl: "http://x", getToken, WebSocket: FakeSocket, refreshBeforeMs: 1900, minDelayMs: 1 });
  try {
    await until("live", () => w.status === "live");
    const socket = FakeSocket.all[0];
    assert.match(socket.url, /^ws:\/\/x\/v1\/users\/u\/stream\?access_token=/);
    await until("a refresh", () => socket.sent.length > 0);
    assert.equal(socket.sent[0].type, "refresh");
    assert.notEqual(socket.sent[0].token, new URL(socket.url).searchParams.get("access_token"));
    assert.equal(FakeSocket.all.length, 1, "no reconnect");
    assert.ok(tokenExpiry(socket.sent[0].token) > Date.now());
  } finally {
    w.close(); // a failed check must not leave the watch's timers holding the test runner
  }
});

test("a stream ended for an expired token reconnects at once with a fresh one; an invalid refresh stops", async () => {
  FakeSocket.all = [];
  let n = 0;
  const w = watch("u", { baseUrl: "http://x", getToken: () => "t" + n++, WebSocket: FakeSocket, minDelayMs: 10_000 });
  await until("live", () => w.status === "live");
  FakeSocket.all[0].push({ type: "state", version: 3, state: view(1) });
  FakeSocket.all[0].push({ type: "closing", reason: "token_expired" });
  FakeSocket.all[0].close(4001);
  await until("a second socket", () => FakeSocket.all.length === 2);
  assert.match(FakeSocket.all[1].url, /since=3&access_token=t1$/);
  await until("live again", () => w.status === "live");
  FakeSocket.all[1].push({ type: "closing", reason: "token_invalid" });
  await until("unauthorized", () => w.status === "unauthorized");
  await sleep(20);
  assert.equal(FakeSocket.all.length, 2);
  w.close();
});

test("a gateway call retries a 503 with the same Idempotency-Key, and throws a 400 at once", async () => {
  const seen = [];
  const answers = [new Response("busy", { status: 503 }), Response.json({ event_ids: ["e1"] }, { status: 202 }),
    Response.json({ error: { code: "invalid_body", message: "read_seq is required" } }, { status: 400 })];
  const fetch = async (url, init) => { seen.push({ url, init }); return answers.shift(); };
  const g = new Gateway({ baseUrl: "http://x", token: "t", fetch, backoff: { minDelayMs: 1, maxDelayMs: 2 } });
  assert.deepEqual(await g.readThread("u", "c/1", 12), { event_ids: ["e1"] });
  assert.equal(seen.length, 2);
  assert.equal(seen[0].url, "http://x/v1/users/u/conversations/c%2F1/threads/12/read");
  const key = seen[0].init.headers["idempotency-key"];
  assert.ok(key && key === seen[1].init.headers["idempotency-key"], "one key for both attempts");
  await assert.rejects(g.readReactions("u", "c", 1), (e) => e instanceof UnreadError && e.code === "invalid_body");
  assert.equal(seen.length, 3, "a 400 is not retried");
  assert.notEqual(seen[2].init.headers["idempotency-key"], key, "a new call, a new key");
});
