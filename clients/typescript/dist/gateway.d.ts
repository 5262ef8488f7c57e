import { type Backoff } from "./backoff.js";
import type { Accepted } from "./types.js";
/** Options of {@link Gateway}. */
export interface GatewayOptions {
    /** The API's origin; default `""`: the page's own origin. */
    baseUrl?: string;
    /** A bearer token that never changes; otherwise {@link GatewayOptions.getToken}. */
    token?: string;
    /** Called for a token before each request. */
    getToken?: () => string | undefined | Promise<string | undefined>;
    /** A fetch (default: the global one). */
    fetch?: typeof fetch;
    /** Attempts after the first when the network fails or the server answers 429 or 5xx (default 3). */
    retries?: number;
    /** Delays between attempts (default 200 ms doubling to 2 s, with jitter). */
    backoff?: Backoff;
}
/** A request the API refused: its HTTP status and the error's stable `code` (docs/api.md, Errors). */
export declare class UnreadError extends Error {
    readonly status: number;
    readonly code: string;
    constructor(status: number, code: string, message: string);
}
/**
 * The write gateway (docs/api.md, Write gateway): each call publishes user events and answers their ids; the counts
 * change once the service has folded them (a {@link Watch} sees it). Every call carries a fresh `Idempotency-Key`,
 * and is retried with the same key (so it publishes once) when the network fails or the server answers 429 or 5xx;
 * a 4xx other than 429 throws {@link UnreadError} at once.
 */
export declare class Gateway {
    private readonly options;
    constructor(options?: GatewayOptions);
    /** Reads a conversation up to `readSeq`, by default up to its newest message (`read.ack`). */
    read(userId: string, conversationId: string, readSeq?: number): Promise<Accepted>;
    /** Reads every unmuted conversation with unread, and its followed threads (mark all read). */
    readAll(userId: string): Promise<Accepted>;
    /** Mutes or unmutes a conversation. */
    mute(userId: string, conversationId: string, muted: boolean): Promise<Accepted>;
    /** Marks a conversation unread, from `fromSeq` if given; `marked: false` takes the mark away. */
    markUnread(userId: string, conversationId: string, mark?: {
        fromSeq?: number;
    } | {
        marked: false;
    }): Promise<Accepted>;
    /** Reads every followed timeline with unread posts (the feed's "N new posts"). */
    readFeed(userId: string): Promise<Accepted>;
    /** Reads one notification. */
    readNotification(userId: string, notificationId: string): Promise<Accepted>;
    /** Marks the notifications of `category` (default: every category) seen. */
    notificationsSeen(userId: string, category?: string): Promise<Accepted>;
    /** Marks the notifications of `category` (default: every category) read. */
    notificationsRead(userId: string, category?: string): Promise<Accepted>;
    /** Reads a broadcast list up to `readSeq`, by default its head (the red dot). */
    readBroadcast(userId: string, broadcastId: string, readSeq?: number): Promise<Accepted>;
    /** Reads a thread up to `readSeq`, by default whole (contract v4). */
    readThread(userId: string, conversationId: string, root: number, readSeq?: number): Promise<Accepted>;
    /** Follows or unfollows a thread (contract v4). */
    followThread(userId: string, conversationId: string, root: number, followed: boolean): Promise<Accepted>;
    /** Marks a conversation's reactions seen up to `readSeq`, a `reaction_seq`, by default every reaction so far
     * (contract v4). */
    readReactions(userId: string, conversationId: string, readSeq?: number): Promise<Accepted>;
    private post;
}
