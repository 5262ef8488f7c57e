import { backoffDelay, DEFAULT_BACKOFF, type Backoff } from "./backoff.js";
import { Counts } from "./counts.js";
import { openEventStream, openWebSocket, type Connection, type Ended, type WebSocketClass } from "./transport.js";
import type { ServerMessage, UnreadCounts } from "./types.js";

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

type Listeners = { [K in keyof WatchEvents]: Set<WatchEvents[K]> };

/** The `exp` of a JWT in ms since the epoch, if it has one. */
export function tokenExpiry(token: string | undefined): number | undefined {
  const payload = token?.split(".")[1];
  if (!payload) return undefined;
  try {
    const json = atob(payload.replace(/-/g, "+").replace(/_/g, "/"));
    const exp = (JSON.parse(json) as { exp?: unknown }).exp;
    return typeof exp === "number" ? exp * 1000 : undefined;
  } catch {
    return undefined;
  }
}

/** One user's counts, live from `GET /v1/users/{user_id}/stream`. Create with {@link watch}. */
export class Watch {
  /** The status (see {@link WatchStatus}). */
  status: WatchStatus = "connecting";
  private readonly state = new Counts();
  private readonly listeners: Listeners = { counts: new Set(), status: new Set() };
  private connection: Connection | null = null;
  private attempts = 0;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private refreshTimer: ReturnType<typeof setTimeout> | undefined;
  /** Bumped by every connect and close: callbacks of an older connection do nothing. */
  private generation = 0;
  private readonly backoff: Backoff;

  constructor(
    readonly userId: string,
    private readonly options: WatchOptions = {},
  ) {
    this.backoff = { ...DEFAULT_BACKOFF, ...definedOnly({ minDelayMs: options.minDelayMs, maxDelayMs: options.maxDelayMs }) };
    void this.connect();
  }

  /** The counts, `null` until the first state arrives. */
  get counts(): UnreadCounts | null {
    return this.state.view;
  }

  /** The version of the last message applied (0 before any). */
  get version(): number {
    return this.state.version;
  }

  /** Calls `listener` on `event` until the returned function is called. */
  on<K extends keyof WatchEvents>(event: K, listener: WatchEvents[K]): () => void {
    this.listeners[event].add(listener);
    return () => this.listeners[event].delete(listener);
  }

  /** Stops for good: closes the connection and every timer. */
  close(): void {
    this.generation += 1;
    this.stopTimers();
    this.connection?.close();
    this.connection = null;
    this.setStatus("closed");
  }

  /** Connects again now (after `unauthorized`, once a new token is at hand), resuming from {@link Watch.version}. */
  reconnect(): void {
    this.generation += 1;
    this.stopTimers();
    this.connection?.close();
    this.connection = null;
    this.attempts = 0;
    void this.connect();
  }

  private stopTimers(): void {
    clearTimeout(this.timer);
    clearTimeout(this.refreshTimer);
  }

  private setStatus(status: WatchStatus, reason?: string): void {
    if (status === this.status && status !== "reconnecting") return;
    this.status = status;
    for (const l of this.listeners.status) l(status, reason);
  }

  private async token(): Promise<string | undefined> {
    return (await this.options.getToken?.()) ?? this.options.token;
  }

  private url(token: string | undefined, inQuery: boolean): string {
    const query = new URLSearchParams();
    if (this.state.version) query.set("since", String(this.state.version));
    if (inQuery && token) query.set("access_token", token);
    const q = query.toString();
    const path = "/v1/users/" + encodeURIComponent(this.userId) + "/stream";
    return (this.options.baseUrl ?? "") + path + (q ? "?" + q : "");
  }

  private async connect(): Promise<void> {
    const generation = ++this.generation;
    const token = await this.token().catch(() => undefined);
    if (generation !== this.generation) return;
    const Socket = this.options.WebSocket ?? (globalThis as { WebSocket?: WebSocketClass }).WebSocket;
    const useSocket = this.options.transport !== "sse" && Socket !== undefined;
    if (this.options.transport === "websocket" && !Socket) throw new Error("no WebSocket here: pass options.WebSocket");
    const expired = { seen: false };
    const listener = {
      onOpen: () => {
        if (generation !== this.generation) return;
        this.attempts = 0;
        this.setStatus("live");
        this.scheduleRefresh(generation, token, useSocket);
      },
      onMessage: (text: string) => {
        if (generation === this.generation) this.message(text, expired);
      },
      onEnd: (ended: Ended) => {
        if (generation === this.generation) void this.ended(ended, token, useSocket, expired.seen);
      },
    };
    const fetcher = this.options.fetch ?? globalThis.fetch.bind(globalThis);
    this.connection = useSocket
      ? openWebSocket(Socket!, this.url(token, true), listener)
      : openEventStream(fetcher, this.url(token, false), token, listener);
  }

  private message(text: string, expired: { seen: boolean }): void {
    let message: ServerMessage;
    try {
      message = JSON.parse(text) as ServerMessage;
    } catch {
      return;
    }
    if (message.type === "closing") {
      if (message.reason === "token_expired") expired.seen = true;
      else this.unauthorized(message.reason);
      return;
    }
    const applied = this.state.apply(message);
    if ((applied === "state" || applied === "changes") && this.state.view) {
      for (const l of this.listeners.counts) l(this.state.view, applied);
    }
  }

  private unauthorized(reason: string): void {
    this.generation += 1;
    this.stopTimers();
    this.connection?.close();
    this.connection = null;
    this.setStatus("unauthorized", reason);
  }

  /** The connection ended: stop on a refused token, come back at once after an expiry, else after the backoff. */
  private async ended(ended: Ended, token: string | undefined, socket: boolean, expired: boolean): Promise<void> {
    clearTimeout(this.refreshTimer);
    this.connection = null;
    if (ended.status === 401 || ended.status === 403) return this.unauthorized(ended.status === 401 ? "unauthorized" : "forbidden");
    if (ended.code === 4003) return this.unauthorized("forbidden");
    if (ended.code === 4001 && !expired) return this.unauthorized("token_invalid");
    if (expired) {
      this.attempts = 0;
      return void this.connect();
    }
    if (socket && !ended.opened) {
      // A refused WebSocket upgrade shows no status: ask the read route whether the token is the reason.
      const generation = this.generation;
      const status = await this.probe(token);
      if (generation !== this.generation) return;
      if (status === 401 || status === 403) return this.unauthorized(status === 401 ? "unauthorized" : "forbidden");
    }
    const delay = backoffDelay(this.attempts, this.backoff);
    this.attempts += 1;
    this.setStatus("reconnecting", ended.status ? "HTTP " + ended.status : "disconnected");
    const generation = this.generation;
    this.timer = setTimeout(() => {
      if (generation === this.generation) void this.connect();
    }, delay);
  }

  private async probe(token: string | undefined): Promise<number | undefined> {
    const headers: Record<string, string> = token ? { authorization: "Bearer " + token } : {};
    const fetcher = this.options.fetch ?? globalThis.fetch.bind(globalThis);
    const url = (this.options.baseUrl ?? "") + "/v1/users/" + encodeURIComponent(this.userId) + "/unread";
    try {
      return (await fetcher(url, { headers })).status;
    } catch {
      return undefined;
    }
  }

  /** Before `token` expires: a WebSocket sends a fresh one over the socket; Server-Sent Events reconnect with it. */
  private scheduleRefresh(generation: number, token: string | undefined, socket: boolean): void {
    const exp = tokenExpiry(token);
    if (exp === undefined || !this.options.getToken) return;
    const wait = Math.max(0, exp - (this.options.refreshBeforeMs ?? 30_000) - Date.now());
    this.refreshTimer = setTimeout(async () => {
      if (generation !== this.generation) return;
      if (!socket) return this.reconnect();
      const fresh = await this.token().catch(() => undefined);
      if (generation !== this.generation || !fresh) return;
      this.connection?.send(JSON.stringify({ type: "refresh", token: fresh }));
      this.scheduleRefresh(generation, fresh, socket);
    }, wait);
  }
}

function definedOnly<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/**
 * Watches `userId`'s counts: connects to the stream (a WebSocket, else Server-Sent Events), applies its messages in
 * version order, resumes with `since` after a drop (exponential backoff with jitter), refreshes the token before it
 * expires, and stops on a refused token. Listen with {@link Watch.on}; stop with {@link Watch.close}.
 */
export function watch(userId: string, options: WatchOptions = {}): Watch {
  return new Watch(userId, options);
}
