export { backoffDelay, DEFAULT_BACKOFF, type Backoff } from "./backoff.js";
export { Counts, type Applied } from "./counts.js";
export { Gateway, UnreadError, type GatewayOptions } from "./gateway.js";
export { tokenExpiry, watch, Watch, type WatchEvents, type WatchOptions, type WatchStatus } from "./watch.js";
export type { WebSocketClass } from "./transport.js";
export type { Accepted, ConversationCounts, ServerMessage, StreamMessage, ThreadPage, UnreadCounts } from "./types.js";
export type { components, paths } from "./generated/openapi.js";
