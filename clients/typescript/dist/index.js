// @unread/client: live, exact unread counts from an unread service (its stream) and its write gateway.
export { backoffDelay, DEFAULT_BACKOFF } from "./backoff.js";
export { Counts } from "./counts.js";
export { Gateway, UnreadError } from "./gateway.js";
export { tokenExpiry, watch, Watch } from "./watch.js";
