import { backoffDelay, DEFAULT_BACKOFF } from "./backoff.js";
import { Counts } from "./counts.js";
import { openEventStream, openWebSocket } from "./transport.js";
/** The `exp` of a JWT in ms since the epoch, if it has one. */
export function tokenExpiry(token) {
    const payload = token?.split(".")[1];
    if (!payload)
        return undefined;
    try {
        const json = atob(payload.replace(/-/g, "+").replace(/_/g, "/"));
        const exp = JSON.parse(json).exp;
        return typeof exp === "number" ? exp * 1000 : undefined;
    }
    catch {
        return undefined;
    }
}
/** One user's counts, live from `GET /v1/users/{user_id}/stream`. Create with {@link watch}. */
export class Watch {
    userId;
    options;
    /** The status (see {@link WatchStatus}). */
    status = "connecting";
    state = new Counts();
    listeners = { counts: new Set(), status: new Set() };
    connection = null;
    attempts = 0;
    timer;
    refreshTimer;
    /** Bumped by every connect and close: callbacks of an older connection do nothing. */
    generation = 0;
    backoff;
    constructor(userId, options = {}) {
        this.userId = userId;
        this.options = options;
        this.backoff = { ...DEFAULT_BACKOFF, ...definedOnly({ minDelayMs: options.minDelayMs, maxDelayMs: options.maxDelayMs }) };
        void this.connect();
    }
    /** The counts, `null` until the first state arrives. */
    get counts() {
        return this.state.view;
    }
    /** The version of the last message applied (0 before any). */
    get version() {
        return this.state.version;
    }
    /** Calls `listener` on `event` until the returned function is called. */
    on(event, listener) {
        this.listeners[event].add(listener);
        return () => this.listeners[event].delete(listener);
    }
    /** Stops for good: closes the connection and every timer. */
    close() {
        this.generation += 1;
        this.stopTimers();
        this.connection?.close();
        this.connection = null;
        this.setStatus("closed");
    }
    /** Connects again now (after `unauthorized`, once a new token is at hand), resuming from {@link Watch.version}. */
    reconnect() {
        this.generation += 1;
        this.stopTimers();
        this.connection?.close();
        this.connection = null;
        this.attempts = 0;
        void this.connect();
    }
    stopTimers() {
        clearTimeout(this.timer);
        clearTimeout(this.refreshTimer);
    }
    setStatus(status, reason) {
        if (status === this.status && status !== "reconnecting")
            return;
        this.status = status;
        for (const l of this.listeners.status)
            l(status, reason);
    }
    async token() {
        return (await this.options.getToken?.()) ?? this.options.token;
    }
    url(token, inQuery) {
        const query = new URLSearchParams();
        if (this.state.version)
            query.set("since", String(this.state.version));
        if (inQuery && token)
            query.set("access_token", token);
        const q = query.toString();
        const path = "/v1/users/" + encodeURIComponent(this.userId) + "/stream";
        return (this.options.baseUrl ?? "") + path + (q ? "?" + q : "");
    }
    async connect() {
        const generation = ++this.generation;
        const token = await this.token().catch(() => undefined);
        if (generation !== this.generation)
            return;
        const Socket = this.options.WebSocket ?? globalThis.WebSocket;
        const useSocket = this.options.transport !== "sse" && Socket !== undefined;
        if (this.options.transport === "websocket" && !Socket)
            throw new Error("no WebSocket here: pass options.WebSocket");
        const expired = { seen: false };
        const listener = {
            onOpen: () => {
                if (generation !== this.generation)
                    return;
                this.attempts = 0;
                this.setStatus("live");
                this.scheduleRefresh(generation, token, useSocket);
            },
            onMessage: (text) => {
                if (generation === this.generation)
                    this.message(text, expired);
            },
            onEnd: (ended) => {
                if (generation === this.generation)
                    void this.ended(ended, token, useSocket, expired.seen);
            },
        };
        const fetcher = this.options.fetch ?? globalThis.fetch.bind(globalThis);
        this.connection = useSocket
            ? openWebSocket(Socket, this.url(token, true), listener)
            : openEventStream(fetcher, this.url(token, false), token, listener);
    }
    message(text, expired) {
        let message;
        try {
            message = JSON.parse(text);
        }
        catch {
            return;
        }
        if (message.type === "closing") {
            if (message.reason === "token_expired")
                expired.seen = true;
            else
                this.unauthorized(message.reason);
            return;
        }
        const applied = this.state.apply(message);
        if ((applied === "state" || applied === "changes") && this.state.view) {
            for (const l of this.listeners.counts)
                l(this.state.view, applied);
        }
    }
    unauthorized(reason) {
        this.generation += 1;
        this.stopTimers();
        this.connection?.close();
        this.connection = null;
        this.setStatus("unauthorized", reason);
    }
    /** The connection ended: stop on a refused token, come back at once after an expiry, else after the backoff. */
    async ended(ended, token, socket, expired) {
        clearTimeout(this.refreshTimer);
        this.connection = null;
        if (ended.status === 401 || ended.status === 403)
            return this.unauthorized(ended.status === 401 ? "unauthorized" : "forbidden");
        if (ended.code === 4003)
            return this.unauthorized("forbidden");
        if (ended.code === 4001 && !expired)
            return this.unauthorized("token_invalid");
        if (expired) {
            this.attempts = 0;
            return void this.connect();
        }
        if (socket && !ended.opened) {
            // A refused WebSocket upgrade shows no status: ask the read route whether the token is the reason.
            const generation = this.generation;
            const status = await this.probe(token);
            if (generation !== this.generation)
                return;
            if (status === 401 || status === 403)
                return this.unauthorized(status === 401 ? "unauthorized" : "forbidden");
        }
        const delay = backoffDelay(this.attempts, this.backoff);
        this.attempts += 1;
        this.setStatus("reconnecting", ended.status ? "HTTP " + ended.status : "disconnected");
        const generation = this.generation;
        this.timer = setTimeout(() => {
            if (generation === this.generation)
                void this.connect();
        }, delay);
    }
    async probe(token) {
        const headers = token ? { authorization: "Bearer " + token } : {};
        const fetcher = this.options.fetch ?? globalThis.fetch.bind(globalThis);
        const url = (this.options.baseUrl ?? "") + "/v1/users/" + encodeURIComponent(this.userId) + "/unread";
        try {
            return (await fetcher(url, { headers })).status;
        }
        catch {
            return undefined;
        }
    }
    /** Before `token` expires: a WebSocket sends a fresh one over the socket; Server-Sent Events reconnect with it. */
    scheduleRefresh(generation, token, socket) {
        const exp = tokenExpiry(token);
        if (exp === undefined || !this.options.getToken)
            return;
        const wait = Math.max(0, exp - (this.options.refreshBeforeMs ?? 30_000) - Date.now());
        this.refreshTimer = setTimeout(async () => {
            if (generation !== this.generation)
                return;
            if (!socket)
                return this.reconnect();
            const fresh = await this.token().catch(() => undefined);
            if (generation !== this.generation || !fresh)
                return;
            this.connection?.send(JSON.stringify({ type: "refresh", token: fresh }));
            this.scheduleRefresh(generation, fresh, socket);
        }, wait);
    }
}
function definedOnly(o) {
    return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined));
}
/**
 * Watches `userId`'s counts: connects to the stream (a WebSocket, else Server-Sent Events), applies its messages in
 * version order, resumes with `since` after a drop (exponential backoff with jitter), refreshes the token before it
 * expires, and stops on a refused token. Listen with {@link Watch.on}; stop with {@link Watch.close}.
 */
export function watch(userId, options = {}) {
    return new Watch(userId, options);
}
