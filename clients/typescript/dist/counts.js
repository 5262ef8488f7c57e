/**
 * A user's counts kept from the stream's messages (docs/api.md, Stream): a `state` replaces them, a `changes` sets
 * the values it carries (`null`: the entry left), and either is dropped unless its version is above the last one
 * applied, so that a late or repeated message never counts twice. Pure: no I/O.
 */
export class Counts {
    /** The counts, `null` until the first `state`. */
    view = null;
    /** The version of the last message applied, 0 before any: what a reconnect passes as `since`. */
    version = 0;
    /** Applies `message`; says whether it changed the counts. `refreshed` and `closing` are not counts: ignored. */
    apply(message) {
        if (message.type === "state") {
            if (this.view !== null && message.version <= this.version)
                return "dropped";
            this.view = message.state;
            this.version = message.version;
            return "state";
        }
        if (message.type !== "changes")
            return "ignored";
        if (message.version <= this.version || this.view === null)
            return "dropped";
        const view = this.view;
        if (message.totals)
            Object.assign(view, message.totals);
        for (const part of ["conversations", "broadcasts", "notifications", "threads", "teams"]) {
            const entries = message[part];
            if (!entries)
                continue;
            const into = (view[part] ??= {});
            for (const [id, value] of Object.entries(entries)) {
                if (value === null)
                    delete into[id];
                else
                    into[id] = value;
            }
        }
        this.version = message.version;
        return "changes";
    }
}
