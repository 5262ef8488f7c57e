/** How a connection ended. */
export interface Ended {
    /** The WebSocket close code, if any (4001: token expired or invalid, 4003: forbidden). */
    code?: number;
    /** The HTTP status, when the server answered the request with an error (SSE only: 401, 403, 406, …). */
    status?: number;
    /** The connection was established before it ended. */
    opened: boolean;
}
/** What a transport reports. */
export interface Listener {
    onOpen(): void;
    onMessage(text: string): void;
    onEnd(ended: Ended): void;
}
/** An open connection. */
export interface Connection {
    /** Sends a text (WebSocket only; false when it cannot). */
    send(text: string): boolean;
    /** Closes it; no `onEnd` follows. */
    close(): void;
}
/** A WebSocket class: the browser's, Node 22's, or one given (the `ws` package's). */
export type WebSocketClass = new (url: string) => WebSocket;
/** Opens `url` (with `access_token` in its query, as browsers cannot set headers on a WebSocket). */
export declare function openWebSocket(Socket: WebSocketClass, url: string, listener: Listener): Connection;
/** Opens `url` as Server-Sent Events with `fetch`, the token in the `Authorization` header. */
export declare function openEventStream(fetcher: typeof fetch, url: string, token: string | undefined, listener: Listener): Connection;
