// The two ways to hear a stream: a WebSocket, or Server-Sent Events read with fetch (Node 20 has no WebSocket;
// fetch also sends the token in a header). Each hands whole JSON texts to `onMessage` and reports its end once.

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
export function openWebSocket(Socket: WebSocketClass, url: string, listener: Listener): Connection {
  const socket = new Socket(url.replace(/^http/, "ws"));
  let opened = false;
  let live = true;
  socket.onopen = () => {
    opened = true;
    if (live) listener.onOpen();
  };
  socket.onmessage = (e: MessageEvent) => {
    if (live && typeof e.data === "string") listener.onMessage(e.data);
  };
  socket.onclose = (e: CloseEvent) => {
    if (!live) return;
    live = false;
    listener.onEnd({ code: e.code, opened });
  };
  return {
    send: (text) => {
      if (socket.readyState !== 1) return false;
      socket.send(text);
      return true;
    },
    close: () => {
      live = false;
      socket.close();
    },
  };
}

/** Opens `url` as Server-Sent Events with `fetch`, the token in the `Authorization` header. */
export function openEventStream(fetcher: typeof fetch, url: string, token: string | undefined, listener: Listener): Connection {
  const abort = new AbortController();
  let live = true;
  const end = (ended: Ended) => {
    if (!live) return;
    live = false;
    listener.onEnd(ended);
  };
  (async () => {
    const headers: Record<string, string> = { accept: "text/event-stream" };
    if (token) headers.authorization = "Bearer " + token;
    let response: Response;
    try {
      response = await fetcher(url, { headers, signal: abort.signal });
    } catch {
      return end({ opened: false });
    }
    if (!response.ok || !response.body) return end({ status: response.status, opened: false });
    if (live) listener.onOpen();
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let data: string[] = [];
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done || !live) break;
        buffer += value;
        let newline: number;
        while ((newline = buffer.indexOf("\n")) >= 0) {
          const line = buffer.slice(0, newline).replace(/\r$/, "");
          buffer = buffer.slice(newline + 1);
          if (line === "") {
            // An event ends at a blank line; a comment line (":", the heartbeat) carries nothing.
            if (data.length && live) listener.onMessage(data.join("\n"));
            data = [];
          } else if (line.startsWith("data:")) {
            data.push(line.slice(5).replace(/^ /, ""));
          }
        }
      }
    } catch {
      // The connection broke: ended below.
    }
    end({ opened: true });
  })();
  return {
    send: () => false,
    close: () => {
      live = false;
      abort.abort();
    },
  };
}
