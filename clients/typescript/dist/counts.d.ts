import type { ServerMessage, UnreadCounts } from "./types.js";
/** What applying one stream message did. */
export type Applied = "state" | "changes" | "dropped" | "ignored";
/**
 * A user's counts kept from the stream's messages (docs/api.md, Stream): a `state` replaces them, a `changes` sets
 * the values it carries (`null`: the entry left), and either is dropped unless its version is above the last one
 * applied, so that a late or repeated message never counts twice. Pure: no I/O.
 */
export declare class Counts {
    /** The counts, `null` until the first `state`. */
    view: UnreadCounts | null;
    /** The version of the last message applied, 0 before any: what a reconnect passes as `since`. */
    version: number;
    /** Applies `message`; says whether it changed the counts. `refreshed` and `closing` are not counts: ignored. */
    apply(message: ServerMessage): Applied;
}
