// The two ways to hear a stream: a WebSocket, or Server-Sent Events read with fetch (Node 20 has no WebSocket;
// fetch also sends the token in a header). Each hands whole JSON texts to `onMessage` and reports its end once.
/** Opens `url` (with `access_token` in its query, as browsers cannot set headers on a WebSocket). */
export function openWebSocket(Socket, url, listener) {
    const socket = new Socket(url.replace(/^http/, "ws"));
    let opened = false;
    let live = true;
    socket.onopen = () => {
        opened = true;
        if (live)
            listener.onOpen();
    };
    socket.onmessage = (e) => {
        if (live && typeof e.data === "string")
            listener.onMessage(e.data);
    };
    socket.onclose = (e) => {
        if (!live)
            return;
        live = false;
        listener.onEnd({ code: e.code, opened });
    };
    return {
        send: (text) => {
            if (socket.readyState !== 1)
                return false;
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
export function openEventStream(fetcher, url, token, listener) {
    const abort = new AbortController();
    let live = true;
    const end = (ended) => {
        if (!live)
            return;
        live = false;
        listener.onEnd(ended);
    };
    (async () => {
        const headers = { accept: "text/event-stream" };
        if (token)
            headers.authorization = "Bearer " + token;
        let response;
        try {
            response = await fetcher(url, { headers, signal: abort.signal });
        }
        catch {
            return end({ opened: false });
        }
        if (!response.ok || !response.body)
            return end({ status: response.status, opened: false });
        if (live)
            listener.onOpen();
        const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = "";
        let data = [];
        try {
            for (;;) {
                const { value, done } = await reader.read();
                if (done || !live)
                    break;
                buffer += value;
                let newline;
                while ((newline = buffer.indexOf("\n")) >= 0) {
                    const line = buffer.slice(0, newline).replace(/\r$/, "");
                    buffer = buffer.slice(newline + 1);
                    if (line === "") {
                        // An event ends at a blank line; a comment line (":", the heartbeat) carries nothing.
                        if (data.length && live)
                            listener.onMessage(data.join("\n"));
                        data = [];
                    }
                    else if (line.startsWith("data:")) {
                        data.push(line.slice(5).replace(/^ /, ""));
                    }
                }
            }
        }
        catch {
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
