import { type Backoff } from "./backoff.js";
import { type WebSocketClass } from "./transport.js";
import type { UnreadCounts } from "./types.js";
/**
 * Where a watch is: `connecting` (the first time), `live` (the stream is open), `reconnecting` (it dropped; the next
 * attempt waits for the backoff), `unauthorized` (the server refused the token: no retry until {@link Watch.reconnect}),
 * `closed` ({@link Watch.close}).
 */
export type WatchStatus = "connecting" | "live" | "reconnecting" | "unauthorized" | "closed";
/** Options of {@link watch}. */
export interface WatchOptions extends Partial<Backoff> {
    /** The API's origin, e.g. `https://unread.example.com`; default `""`: the page's own origin. */
    baseUrl?: string;
    /** A bearer token (a JWT), when it never changes; otherwise {@link WatchOptions.getToken}. */
    token?: string;
    /**
     * Called for a token before each connection and before the current token expires: a WebSocket sends the new one
     * over the socket (the stream goes on), Server-Sent Events reconnect with it (resuming with `since`).
     */
    getToken?: () => string | undefined | Promise<string | undefined>;
    /** `auto` (default): a WebSocket where one exists, else Server-Sent Events over fetch (Node 20). */
    transport?: "auto" | "websocket" | "sse";
    /** A WebSocket class where there is no global one (Node 20: the `ws` package's). */
    WebSocket?: WebSocketClass;
    /** A fetch (default: the global one). */
    fetch?: typeof fetch;
    /** How long before its `exp` a token is refreshed, in ms (default 30,000). */
    refreshBeforeMs?: number;
}
/** What a watch tells its listeners. */
export interface WatchEvents {
    /** The counts changed: after a `state` (the whole counts) or a `changes` applied in version order. */
    counts: (counts: UnreadCounts, applied: "state" | "changes") => void;
    /** The status changed; `reason` says why for `unauthorized` and `reconnecting`. */
    status: (status: WatchStatus, reason?: string) => void;
}
/** The `exp` of a JWT in ms since the epoch, if it has one. */
export declare function tokenExpiry(token: string | undefined): number | undefined;
/** One user's counts, live from `GET /v1/users/{user_id}/stream`. Create with {@link watch}. */
export declare class Watch {
    readonly userId: string;
    private readonly options;
    /** The status (see {@link WatchStatus}). */
    status: WatchStatus;
    private readonly state;
    private readonly listeners;
    private connection;
    private attempts;
    private timer;
    private refreshTimer;
    /** Bumped by every connect and close: callbacks of an older connection do nothing. */
    private generation;
    private readonly backoff;
    constructor(userId: string, options?: WatchOptions);
    /** The counts, `null` until the first state arrives. */
    get counts(): UnreadCounts | null;
    /** The version of the last message applied (0 before any). */
    get version(): number;
    /** Calls `listener` on `event` until the returned function is called. */
    on<K extends keyof WatchEvents>(event: K, listener: WatchEvents[K]): () => void;
    /** Stops for good: closes the connection and every timer. */
    close(): void;
    /** Connects again now (after `unauthorized`, once a new token is at hand), resuming from {@link Watch.version}. */
    reconnect(): void;
    private stopTimers;
    private setStatus;
    private token;
    private url;
    private connect;
    private message;
    private unauthorized;
    /** The connection ended: stop on a refused token, come back at once after an expiry, else after the backoff. */
    private ended;
    private probe;
    /** Before `token` expires: a WebSocket sends a fresh one over the socket; Server-Sent Events reconnect with it. */
    private scheduleRefresh;
}
/**
 * Watches `userId`'s counts: connects to the stream (a WebSocket, else Server-Sent Events), applies its messages in
 * version order, resumes with `since` after a drop (exponential backoff with jitter), refreshes the token before it
 * expires, and stops on a refused token. Listen with {@link Watch.on}; stop with {@link Watch.close}.
 */
export declare function watch(userId: string, options?: WatchOptions): Watch;
