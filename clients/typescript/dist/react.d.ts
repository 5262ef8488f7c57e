import { type WatchOptions, type WatchStatus } from "./watch.js";
import type { UnreadCounts } from "./types.js";
/** What {@link useUnread} returns: a new object whenever the counts or the status change. */
export interface UnreadSnapshot {
    /** The user's counts, `null` until the first message. */
    counts: UnreadCounts | null;
    /** The stream's status. */
    status: WatchStatus;
}
/**
 * A user's live counts in a React component: one watch per `userId`, opened by an effect and closed by its cleanup
 * (so React's strict mode, which runs effects twice, leaves one open). `options` are read when the user changes;
 * pass a stable `getToken`.
 */
export declare function useUnread(userId: string, options?: WatchOptions): UnreadSnapshot;
