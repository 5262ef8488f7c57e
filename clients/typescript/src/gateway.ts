import { backoffDelay, type Backoff } from "./backoff.js";
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
export class UnreadError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = "UnreadError";
  }
}

const seg = encodeURIComponent;

/**
 * The write gateway (docs/api.md, Write gateway): each call publishes user events and answers their ids; the counts
 * change once the service has folded them (a {@link Watch} sees it). Every call carries a fresh `Idempotency-Key`,
 * and is retried with the same key (so it publishes once) when the network fails or the server answers 429 or 5xx;
 * a 4xx other than 429 throws {@link UnreadError} at once.
 */
export class Gateway {
  constructor(private readonly options: GatewayOptions = {}) {}

  /** Reads a conversation up to `readSeq`, by default up to its newest message (`read.ack`). */
  read(userId: string, conversationId: string, readSeq?: number): Promise<Accepted> {
    return this.post(`/v1/users/${seg(userId)}/conversations/${seg(conversationId)}/read`, opt({ read_seq: readSeq }));
  }

  /** Reads every unmuted conversation with unread, and its followed threads (mark all read). */
  readAll(userId: string): Promise<Accepted> {
    return this.post(`/v1/users/${seg(userId)}/read-all`);
  }

  /** Mutes or unmutes a conversation. */
  mute(userId: string, conversationId: string, muted: boolean): Promise<Accepted> {
    return this.post(`/v1/users/${seg(userId)}/conversations/${seg(conversationId)}/mute`, { muted });
  }

  /** Marks a conversation unread, from `fromSeq` if given; `marked: false` takes the mark away. */
  markUnread(userId: string, conversationId: string, mark: { fromSeq?: number } | { marked: false } = {}): Promise<Accepted> {
    const body = "marked" in mark ? { marked: false } : opt({ from_seq: mark.fromSeq });
    return this.post(`/v1/users/${seg(userId)}/conversations/${seg(conversationId)}/mark-unread`, body);
  }

  /** Reads every followed timeline with unread posts (the feed's "N new posts"). */
  readFeed(userId: string): Promise<Accepted> {
    return this.post(`/v1/users/${seg(userId)}/feed/read`);
  }

  /** Reads one notification. */
  readNotification(userId: string, notificationId: string): Promise<Accepted> {
    return this.post(`/v1/users/${seg(userId)}/notifications/${seg(notificationId)}/read`);
  }

  /** Marks the notifications of `category` (default: every category) seen. */
  notificationsSeen(userId: string, category?: string): Promise<Accepted> {
    return this.post(`/v1/users/${seg(userId)}/notifications/seen`, opt({ category }));
  }

  /** Marks the notifications of `category` (default: every category) read. */
  notificationsRead(userId: string, category?: string): Promise<Accepted> {
    return this.post(`/v1/users/${seg(userId)}/notifications/read`, opt({ category }));
  }

  /** Reads a broadcast list up to `readSeq`, by default its head (the red dot). */
  readBroadcast(userId: string, broadcastId: string, readSeq?: number): Promise<Accepted> {
    return this.post(`/v1/users/${seg(userId)}/broadcasts/${seg(broadcastId)}/read`, opt({ read_seq: readSeq }));
  }

  /** Reads a thread up to `readSeq`, by default whole (contract v4). */
  readThread(userId: string, conversationId: string, root: number, readSeq?: number): Promise<Accepted> {
    const path = `/v1/users/${seg(userId)}/conversations/${seg(conversationId)}/threads/${root}/read`;
    return this.post(path, opt({ read_seq: readSeq }));
  }

  /** Follows or unfollows a thread (contract v4). */
  followThread(userId: string, conversationId: string, root: number, followed: boolean): Promise<Accepted> {
    const path = `/v1/users/${seg(userId)}/conversations/${seg(conversationId)}/threads/${root}/follow`;
    return this.post(path, { followed });
  }

  /** Marks a conversation's reactions seen up to `readSeq`, a `reaction_seq`, by default every reaction so far
   * (contract v4). */
  readReactions(userId: string, conversationId: string, readSeq?: number): Promise<Accepted> {
    const path = `/v1/users/${seg(userId)}/conversations/${seg(conversationId)}/reactions/read`;
    return this.post(path, opt({ read_seq: readSeq }));
  }

  private async post(path: string, body?: object): Promise<Accepted> {
    const { retries = 3, backoff = { minDelayMs: 200, maxDelayMs: 2000 } } = this.options;
    const fetcher = this.options.fetch ?? globalThis.fetch.bind(globalThis);
    const key = crypto.randomUUID();
    for (let attempt = 0; ; attempt++) {
      const token = (await this.options.getToken?.()) ?? this.options.token;
      const headers: Record<string, string> = { "content-type": "application/json", "idempotency-key": key };
      if (token) headers.authorization = "Bearer " + token;
      const init = { method: "POST", headers, body: body === undefined ? "" : JSON.stringify(body) };
      let response: Response | undefined;
      try {
        response = await fetcher((this.options.baseUrl ?? "") + path, init);
      } catch (e) {
        if (attempt >= retries) throw e;
      }
      if (response?.ok) return (await response.json()) as Accepted;
      if (response && response.status !== 429 && response.status < 500) throw await refused(response);
      if (attempt >= retries) throw response ? await refused(response) : new Error("unreachable");
      await new Promise((r) => setTimeout(r, backoffDelay(attempt, backoff)));
    }
  }
}

/** The body without its undefined fields (an absent optional field, not a JSON null). */
function opt(body: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(body).filter(([, v]) => v !== undefined));
}

async function refused(response: Response): Promise<UnreadError> {
  const text = await response.text().catch(() => "");
  try {
    const { error } = JSON.parse(text) as { error: { code: string; message: string } };
    return new UnreadError(response.status, error.code, error.message);
  } catch {
    return new UnreadError(response.status, "http_" + response.status, text || response.statusText);
  }
}
