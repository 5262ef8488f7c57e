// The shapes the client hands out, named from the generated contracts (src/generated/): a change of the server's
// /openapi.json or schemas/stream.schema.json regenerates them, and the compiler points at what must follow.
import type { components } from "./generated/openapi.js";
import type { UnreadStreamMessages } from "./generated/stream.js";

/** One user's counts: the reader shape of `GET /v1/users/{user_id}/unread` (docs/contract.md). */
export type UnreadCounts = components["schemas"]["UserView"];
/** One conversation's counts in {@link UnreadCounts}. */
export type ConversationCounts = components["schemas"]["ConversationView"];
/** What a write gateway call answers: the ids of the events it published. */
export type Accepted = components["schemas"]["Accepted"];
/** One page of `GET /v1/users/{user_id}/threads`. */
export type ThreadPage = components["schemas"]["ThreadPage"];
/** Every JSON message of the stream, both ways. */
export type StreamMessage = UnreadStreamMessages;
/** A message the server sends on the stream. */
export type ServerMessage = Exclude<StreamMessage, { type: "refresh" }>;
