/**
 * Every JSON message of GET /v1/users/{user_id}/stream (docs/api.md, Stream): what the server sends (state, changes, refreshed, closing) and what a WebSocket client may send (refresh). Over a WebSocket each is one text frame; over Server-Sent Events each is one event's data, its id the version. Heartbeats carry no JSON: WebSocket ping frames, SSE comment lines.
 */
export type UnreadStreamMessages = State | Changes | Refreshed | Closing | Refresh;
/**
 * The push version: grows whenever anything the user sees changes. A client applies a message only when its version is newer than the one it has.
 */
export type Version = number;
/**
 * The reader shape of GET /v1/users/{user_id}/unread (docs/contract.md).
 */
export type ReaderShape = TotalsOpen & {
    user_id: string;
    conversations: {
        [k: string]: Conversation;
    };
    broadcasts: {
        [k: string]: Broadcast;
    };
    notifications: {
        [k: string]: Notification;
    };
    threads?: {
        [k: string]: {
            [k: string]: Thread;
        };
    };
    teams?: {
        [k: string]: Team;
    };
};
export type Count = number;
/**
 * The whole state: the first message, unless the client's since is current.
 */
export interface State {
    type: "state";
    version: Version;
    state: ReaderShape;
}
export interface TotalsOpen {
    total_unread?: Count;
    total_mentions?: Count;
    unread_conversations?: Count;
    feed_unread?: Count;
    total_notifications_unread?: Count;
    total_notifications_unseen?: Count;
    unread_threads?: Count;
    thread_mentions?: Count;
    total_reactions?: Count;
}
export interface Conversation {
    unread: Count;
    mentions: Count;
    muted: boolean;
    marked_unread?: boolean;
    first_unread?: number | null;
    reactions?: Count;
}
export interface Broadcast {
    unread: Count;
    dot: boolean;
}
export interface Notification {
    unread: Count;
    unseen: Count;
}
export interface Thread {
    unread: Count;
    mentions: Count;
}
export interface Team {
    unread: Count;
    mentions: Count;
    unread_conversations: Count;
}
/**
 * What changed since the previous message, as new values (never increments); null: that entry left the state. Empty (only type and version) when sent first to a client already current.
 */
export interface Changes {
    type: "changes";
    version: Version;
    totals?: Totals;
    conversations?: {
        [k: string]: Conversation | null;
    };
    broadcasts?: {
        [k: string]: Broadcast | null;
    };
    notifications?: {
        [k: string]: Notification | null;
    };
    threads?: {
        [k: string]: {
            [k: string]: Thread;
        } | null;
    };
    teams?: {
        [k: string]: Team | null;
    };
}
/**
 * Every total of the reader shape.
 */
export interface Totals {
    total_unread: Count;
    total_mentions: Count;
    unread_conversations: Count;
    feed_unread: Count;
    total_notifications_unread: Count;
    total_notifications_unseen: Count;
    unread_threads: Count;
    thread_mentions: Count;
    total_reactions: Count;
}
/**
 * The answer to a refresh: the stream now lasts until this Unix time in seconds (the token's exp plus the leeway); null with no authorization configured.
 */
export interface Refreshed {
    type: "refreshed";
    until: number | null;
}
/**
 * The last message before the server ends the stream: the token expired (WebSocket close code 4001), a refreshed token did not verify (4001) or may not act for this user (4003).
 */
export interface Closing {
    type: "closing";
    reason: "token_expired" | "token_invalid" | "forbidden";
}
/**
 * Sent by a WebSocket client before its token's exp: a fresh token for the same user.
 */
export interface Refresh {
    type: "refresh";
    token: string;
}
