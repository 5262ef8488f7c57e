// The client against a live `unread run` (driven by tests/it/typescript.rs): watches a user over Server-Sent Events
// (Node 20 has no WebSocket) while the service folds the dev set, is SIGKILLed and restarted on the same port; exits
// 0 once, after a reconnect, the counts equal the expected ones, having applied every version once, in order.
// Env: UNREAD_URL, UNREAD_USER, UNREAD_TOKEN, UNREAD_EXPECTED (a JSON file: the user's expected reader shape).
import { readFileSync } from "node:fs";
import { watch } from "../dist/index.js";

const { UNREAD_URL, UNREAD_USER, UNREAD_TOKEN, UNREAD_EXPECTED } = process.env;
const expected = JSON.parse(readFileSync(UNREAD_EXPECTED, "utf8"));
const fail = (why) => {
  console.error("FAIL: " + why);
  process.exit(1);
};
/** Whether `got` holds every value of `want` (deep; extra fields of `got` are the newer contracts'). */
const holds = (got, want) =>
  want !== null && typeof want === "object"
    ? got !== null && typeof got === "object" && Object.keys(want).every((k) => holds(got[k], want[k])) &&
      Object.keys(got).every((k) => typeof got[k] !== "object" || got[k] === null || k in want || Object.keys(got[k]).length === 0)
    : got === want;

const w = watch(UNREAD_USER, { baseUrl: UNREAD_URL, getToken: () => UNREAD_TOKEN, minDelayMs: 100, maxDelayMs: 1000 });
let live = false, reconnects = 0, last = 0, applied = 0;
w.on("status", (status, reason) => {
  console.log("status " + status + (reason ? " (" + reason + ")" : ""));
  if (status === "live" && !live) console.log("LIVE");
  live ||= status === "live";
  if (status === "reconnecting") reconnects += 1;
  if (status === "unauthorized") fail("the token was refused: " + reason);
});
w.on("counts", (counts) => {
  if (w.version <= last) fail(`version ${w.version} applied after ${last}`);
  last = w.version;
  applied += 1;
  if (reconnects > 0 && holds(counts, expected)) {
    console.log(`exact after ${reconnects} reconnects and ${applied} messages applied, version ${w.version}`);
    w.close();
    process.exit(0);
  }
});
setTimeout(() => fail(`not exact within 150 s; counts: ${JSON.stringify(w.counts)}`), 150_000);
