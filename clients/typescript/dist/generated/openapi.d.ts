export interface paths {
    "/": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The inbox page. */
        get: operations["page"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/client/{file}": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** One module of the TypeScript client (`@unread/client`), for the inbox and for any page of this origin. */
        get: operations["client"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/inbox.js": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** The inbox's script. */
        get: operations["script"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/openapi.json": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** This document. */
        get: operations["openapi_json"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/stream.schema.json": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * The JSON Schema of every message of the stream (`schemas/stream.schema.json`): `state`, `changes`, `refreshed`,
         *     `closing`, and the client's `refresh`.
         */
        get: operations["stream_schema"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/conversations/{conversation_id}/messages/{seq}/receipts": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * A message's read receipts: of its recipients (the current members but its sender who joined before it), how
         *     many have read it. For a current member's token or a service token.
         */
        get: operations["receipts"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/unread:batch": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Many users' counts in one pipelined Redis round trip (service tokens only). */
        post: operations["batch_unread"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/users/{user_id}/broadcasts/{broadcast_id}/read": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Marks a broadcast list read up to `read_seq`, or its current head: publishes a `broadcast.read`. */
        post: operations["read_broadcast"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/users/{user_id}/conversations/{conversation_id}/mark-unread": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Marks a conversation unread, optionally from a message on, or takes the mark away: publishes a
         *     `conversation.marked_unread` (`CONTRACT.md` § v3). The read route, or a read ack from anywhere, clears it.
         */
        post: operations["mark_unread"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/users/{user_id}/conversations/{conversation_id}/mute": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Mutes or unmutes a conversation: publishes a `conversation.muted`. */
        post: operations["mute_conversation"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/users/{user_id}/conversations/{conversation_id}/reactions/read": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Marks a conversation's reactions seen up to `read_seq`, by default every reaction so far: publishes a
         *     `reactions.read` (`CONTRACT.md` § v4, "Reactions"); nothing when no reaction is known in the conversation.
         */
        post: operations["read_reactions"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/users/{user_id}/conversations/{conversation_id}/read": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Marks a conversation read up to `read_seq`, or up to the newest message the user has: publishes a `read.ack`
         *     (nothing when there is nothing to mark).
         */
        post: operations["read_conversation"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/users/{user_id}/conversations/{conversation_id}/threads/{thread_root}/follow": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Follows or unfollows a thread: publishes a `thread.followed` (`CONTRACT.md` § v4, "Threads"). */
        post: operations["follow_thread"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/users/{user_id}/conversations/{conversation_id}/threads/{thread_root}/read": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Marks a thread read up to `read_seq`, by default whole: publishes a `thread.read` (`CONTRACT.md` § v4,
         *     "Threads"); nothing when nothing was ever sent in the conversation.
         */
        post: operations["read_thread"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/users/{user_id}/conversations/{conversation_id}/unread": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** One conversation's counts for one user, from Redis. */
        get: operations["conversation_unread"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/users/{user_id}/feed/read": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Marks the feed seen: a `read.ack` of every followed timeline with unread posts, at the newest post the user
         *     has (`newest_unread`: Redis's newest, or a read-diffused timeline's index head, when above the checkpoint's).
         */
        post: operations["read_feed"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/users/{user_id}/notifications/read": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Marks every notification (of a category, or all) read: publishes a `notifications.read`. */
        post: operations["notifications_read"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/users/{user_id}/notifications/seen": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Marks every notification (of a category, or all) seen: publishes a `notifications.seen`. */
        post: operations["notifications_seen"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/users/{user_id}/notifications/{notification_id}/read": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /** Marks one notification read: publishes a `notification.read`. */
        post: operations["read_notification"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/users/{user_id}/read-all": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        get?: never;
        put?: never;
        /**
         * Marks every conversation read: a `read.ack` of each unmuted, non-feed conversation with unread messages (or
         *     marked unread), at the newest message the user has (`newest_unread`, like the read route's default), and (v4)
         *     a `thread.read` of each followed thread with unread in those conversations, at the conversation's newest seq
         *     ([`crate::read::Reader::thread_heads`]). The feed stays apart (`/feed/read`).
         */
        post: operations["read_all"];
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/users/{user_id}/stream": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** A user's counts, pushed: the state, then what changes (docs/api.md § Stream). */
        get: operations["stream"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/users/{user_id}/threads": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /**
         * A user's followed threads with unread replies (`CONTRACT.md` § v4, "Threads"), paged: conversations by id, in
         *     each the newest thread (highest root) first. Muted conversations' threads are listed, flagged `muted`.
         */
        get: operations["list_threads"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
    "/v1/users/{user_id}/unread": {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        /** One user's counts: the contract's reader shape (zeros for a user with state nowhere). */
        get: operations["user_unread"];
        put?: never;
        post?: never;
        delete?: never;
        options?: never;
        head?: never;
        patch?: never;
        trace?: never;
    };
}
export type webhooks = Record<string, never>;
export interface components {
    schemas: {
        /**
         * @description The answer of every write: the ids of the events published (several for `feed/read`, none when there was
         *     nothing to mark).
         */
        Accepted: {
            /** @description The events' `event_id`s, in the order published. */
            event_ids: string[];
        };
        /** @description The answer of `POST /v1/unread:batch`. */
        BatchAnswer: {
            /** @description Each user's reader shape, in the order asked (zeros for a user with no hash). */
            users: components["schemas"]["UserView"][];
        };
        /** @description The body of `POST /v1/unread:batch`. */
        BatchRequest: {
            /** @description The users to read, at most 1,000. */
            user_ids: string[];
        };
        /** @description The optional body of a broadcast read: `{"read_seq": N}`; absent: the list's head. */
        BroadcastReadBody: {
            /**
             * Format: int64
             * @description The largest seq seen (0 to 2^53); absent: the list's current head.
             */
            read_seq?: number | null;
        };
        /** @description One broadcast list's counts for one user (`CONTRACT.md` § v2, "Broadcasts"). */
        BroadcastView: {
            /** @description `unread > 0`: the red dot. */
            dot: boolean;
            /**
             * Format: int64
             * @description Countable, not recalled publications above the user's cursor.
             */
            unread: number;
        };
        /** @description The optional body of the notification marks: `{"category": "like"}`; absent: every category. */
        CategoryBody: {
            /** @description The category marked (the contract's id rule); absent: every category. */
            category?: string | null;
        };
        /** @description One conversation's counts for one user. */
        ConversationAnswer: {
            /** @description The conversation. */
            conversation_id: string;
            /**
             * Format: int64
             * @description The lowest unread seq, `null` when nothing is unread (contract v4, "jump to the first unread").
             */
            first_unread?: number | null;
            /** @description Whether the user marked the conversation unread (contract v3). */
            marked_unread: boolean;
            /** @description Whether the user is a member (all counts are 0 when not). */
            member: boolean;
            /**
             * Format: int64
             * @description Unread messages that mention the user.
             */
            mentions: number;
            /** @description Whether the user muted the conversation. */
            muted: boolean;
            /**
             * Format: int64
             * @description The user's messages here with a new reaction by someone else (contract v4).
             */
            reactions: number;
            /**
             * Format: int64
             * @description Unread messages.
             */
            unread: number;
            /** @description The user. */
            user_id: string;
        };
        /** @description One conversation's counts for one user. */
        ConversationView: {
            /**
             * Format: int64
             * @description v4: the lowest seq counted in `unread`, `null` when `unread` is 0 ("jump to the first unread"; `CONTRACT.md`
             *     § v4, "First unread").
             */
            first_unread?: number | null;
            /**
             * @description Whether the user marked the conversation unread (v3, `CONTRACT.md` § v3, "Marked unread"); absent in v1
             *     and v2 files, read as false.
             */
            marked_unread?: boolean;
            /**
             * Format: int64
             * @description Unread messages that mention the user.
             */
            mentions: number;
            /** @description Whether the conversation is muted for the user. */
            muted: boolean;
            /**
             * Format: int64
             * @description v4: the user's messages here with a new reaction by someone else (§ v4, "Reactions").
             */
            reactions?: number;
            /**
             * Format: int64
             * @description Unread messages.
             */
            unread: number;
        };
        /** @description Every error's body: `{"error": {"code": "...", "message": "..."}}`. */
        ErrorBody: {
            /** @description The error. */
            error: components["schemas"]["ErrorDetail"];
        };
        /** @description One error: a stable code to match on and a readable message. */
        ErrorDetail: {
            /**
             * @description `invalid_path`, `invalid_id`, `invalid_query`, `invalid_body`, `too_many_ids`, `invalid_header`, `unauthorized`, `forbidden`,
             *     `not_found`, `not_a_stream`, `too_large`, `headers_too_large`, `timeout`, `rate_limited`, `unavailable` or
             *     `malformed`.
             */
            code: string;
            /** @description What went wrong, for people; it never holds another user's data. */
            message: string;
        };
        /** @description The body of a follow: `{"followed": true|false}`. */
        FollowBody: {
            /** @description Follow (`true`) or unfollow (`false`) the thread. */
            followed: boolean;
        };
        /**
         * @description The optional body of a mark-unread (contract v3): `{}` or absent marks the conversation unread,
         *     `{"from_seq": N}` marks it unread from message N on ("unread from here"), `{"marked": false}` takes the mark
         *     away.
         */
        MarkUnreadBody: {
            /**
             * Format: int64
             * @description Unread from this message on (1 to 2^53); only with `marked` true or absent.
             */
            from_seq?: number | null;
            /** @description Set (`true`, the default) or take away (`false`) the mark. */
            marked?: boolean | null;
        };
        /** @description The body of a mute: `{"muted": true|false}`. */
        MuteBody: {
            /** @description Whether the conversation is muted. */
            muted: boolean;
        };
        /** @description One notification category's counts for one user (`CONTRACT.md` § v2, "Notifications"). */
        NotificationView: {
            /**
             * Format: int64
             * @description Created, not read, not retracted.
             */
            unread: number;
            /**
             * Format: int64
             * @description Created, not seen, not read, not retracted.
             */
            unseen: number;
        };
        /**
         * @description The body of a reactions read: `{"read_seq": N}`, the highest `reaction_seq` seen (0 to 2^53), or `{}`: every
         *     reaction so far.
         */
        ReactionsReadBody: {
            /**
             * Format: int64
             * @description The user has seen every reaction of the conversation up to this `reaction_seq`. Absent: every reaction so
             *     far (the conversation's highest `reaction_seq`, [`crate::read::Reader::reaction_head`]).
             */
            read_seq?: number | null;
        };
        /**
         * @description The optional body of a conversation read: `{"read_seq": N}`; absent: the newest message the user has
         *     (`newest_unread`).
         */
        ReadBody: {
            /**
             * Format: int64
             * @description The user has read every message up to and including this seq (0 to 2^53); absent: the newest unread
             *     message of the user's checkpointed state.
             */
            read_seq?: number | null;
        };
        /**
         * @description The read receipts of one message (`CONTRACT.md` § v3, "Read receipts"): of its `recipients` (the current members
         *     other than its sender who joined before it was sent), how many have `read` it. The shape of
         *     `GET /v1/conversations/{conversation_id}/messages/{seq}/receipts` and of a line of `unread fold --receipts`.
         */
        ReceiptView: {
            /** @description The conversation. */
            conversation_id: string;
            /**
             * Format: int64
             * @description Recipients whose cursor is at or above `seq`.
             */
            read: number;
            /** @description With `?list=true`: the readers' ids, sorted (conversations of at most 256 members). */
            readers?: string[] | null;
            /**
             * Format: int64
             * @description Current members other than the sender whose latest join came before the message.
             */
            recipients: number;
            /**
             * Format: int64
             * @description The message's seq.
             */
            seq: number;
        };
        /** @description v4: one team's counts for one user (`CONTRACT.md` § v4, "Teams"): the chat totals over its conversations. */
        TeamView: {
            /**
             * Format: int64
             * @description Sum of `mentions` over all of the team's conversations.
             */
            mentions: number;
            /**
             * Format: int64
             * @description Sum of `unread` over the team's unmuted conversations.
             */
            unread: number;
            /**
             * Format: int64
             * @description The team's unmuted conversations with `unread > 0` or marked unread.
             */
            unread_conversations: number;
        };
        /** @description One followed thread with unread replies. */
        ThreadItem: {
            /** @description The thread's conversation. */
            conversation_id: string;
            /**
             * Format: int64
             * @description Those of them that mention the user.
             */
            mentions: number;
            /** @description The conversation is muted (its threads are listed, but not counted in `unread_threads`). */
            muted: boolean;
            /**
             * Format: int64
             * @description Its root's seq.
             */
            root: number;
            /**
             * Format: int64
             * @description Unread replies (`CONTRACT.md` § v4: countable, of others, above the thread cursor, not expired).
             */
            unread: number;
        };
        /** @description One page of a user's followed threads with unread. */
        ThreadPage: {
            /** @description The `after` of the next page, `null` on the last: opaque. */
            next?: string | null;
            /** @description This page's threads, in order. */
            threads: components["schemas"]["ThreadItem"][];
            /**
             * Format: int64
             * @description Followed threads with unread in the user's view, on every page.
             */
            total: number;
            /** @description The user. */
            user_id: string;
        };
        /** @description The body of a thread read: `{"read_seq": N}`, the highest reply read (0 to 2^53), or `{}`: the whole thread. */
        ThreadReadBody: {
            /**
             * Format: int64
             * @description The user has read every reply of the thread up to and including this seq. Absent: every reply sent so far
             *     (the conversation's newest seq, [`crate::read::Reader::thread_head`]).
             */
            read_seq?: number | null;
        };
        /** @description v4: one followed thread's counts for one user (`CONTRACT.md` § v4, "Threads"). */
        ThreadView: {
            /**
             * Format: int64
             * @description Those of them that mention the user.
             */
            mentions: number;
            /**
             * Format: int64
             * @description Countable, not recalled, not expired replies of others above the user's thread cursor.
             */
            unread: number;
        };
        /** @description One user's counts. Serializes with fields in the contract's order and conversations sorted by id. */
        UserView: {
            /** @description Every broadcast list the user has read (v2). */
            broadcasts?: {
                [key: string]: components["schemas"]["BroadcastView"];
            };
            /** @description Every non-feed conversation the user is a member of, including those with zero unread. */
            conversations: {
                [key: string]: components["schemas"]["ConversationView"];
            };
            /**
             * Format: int64
             * @description Sum of `unread` over the unmuted feed conversations the user follows (v2).
             */
            feed_unread?: number;
            /** @description Every category the user has a notification in (v2). */
            notifications?: {
                [key: string]: components["schemas"]["NotificationView"];
            };
            /** @description v4: per team of the user's non-feed conversations, the chat totals over that team's conversations. */
            teams?: {
                [key: string]: components["schemas"]["TeamView"];
            };
            /**
             * Format: int64
             * @description v4: sum of `mentions` over the followed threads, muted conversations included.
             */
            thread_mentions?: number;
            /** @description v4: per conversation, the followed threads with unread replies, by their root's seq (a string on the wire). */
            threads?: {
                [key: string]: {
                    [key: string]: components["schemas"]["ThreadView"];
                };
            };
            /**
             * Format: int64
             * @description Sum of `mentions` over all member conversations.
             */
            total_mentions: number;
            /**
             * Format: int64
             * @description Sum of `unread` over the categories (v2).
             */
            total_notifications_unread?: number;
            /**
             * Format: int64
             * @description Sum of `unseen` over the categories (v2).
             */
            total_notifications_unseen?: number;
            /**
             * Format: int64
             * @description v4: sum of `reactions` over the non-feed conversations, muted ones included.
             */
            total_reactions?: number;
            /**
             * Format: int64
             * @description Sum of `unread` over unmuted member conversations.
             */
            total_unread: number;
            /**
             * Format: int64
             * @description Unmuted member conversations with `unread > 0` or marked unread (v3).
             */
            unread_conversations: number;
            /**
             * Format: int64
             * @description v4: followed threads with unread replies in unmuted conversations.
             */
            unread_threads?: number;
            /** @description The user (the record key on `unread.user-events`). */
            user_id: string;
        };
    };
    responses: never;
    parameters: never;
    requestBodies: never;
    headers: never;
    pathItems: never;
}
export type $defs = Record<string, never>;
export interface operations {
    page: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The web inbox (HTML) */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "text/html": unknown;
                };
            };
        };
    };
    client: {
        parameters: {
            query?: never;
            header?: never;
            path: {
                /** @description `index.js` (the entry point) or a module it imports */
                file: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description An ES module */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "text/javascript": unknown;
                };
            };
            /** @description No such module */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
        };
    };
    script: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The web inbox's script */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "text/javascript": unknown;
                };
            };
        };
    };
    openapi_json: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The OpenAPI 3.1 document */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": unknown;
                };
            };
        };
    };
    stream_schema: {
        parameters: {
            query?: never;
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The stream's messages, a JSON Schema (2020-12) */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/schema+json": unknown;
                };
            };
        };
    };
    receipts: {
        parameters: {
            query?: {
                /** @description Also name the readers (`readers`, sorted): conversations of at most 256 members. */
                list?: boolean;
            };
            header?: never;
            path: {
                /** @description The conversation, percent-encoded (CONTRACT.md id rule) */
                conversation_id: string;
                /** @description The message's seq */
                seq: number;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description `{"conversation_id", "seq", "read", "recipients"}`, and `readers` with `?list=true` */
            200: {
                headers: {
                    /** @description The live namespace answered from */
                    "x-unread-namespace"?: string;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ReceiptView"];
                };
            };
            /**
             * @description `invalid_path`, `invalid_id` (an id breaking the contract's id rule), `invalid_query`, `invalid_body`, `too_many_ids` or
             *     `invalid_header`.
             */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unauthorized`: no bearer token, or one that does not verify (the `WWW-Authenticate: Bearer` header is set). */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `forbidden`: the token may not read this user (the same answer for every other user). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `not_found`: the seq was never sent, was a duplicate or was recalled */
            404: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `timeout`: the request took longer than `--request-timeout`. */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `too_large`: the body is over `--max-body-bytes`. */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `rate_limited`: over the token's rate limit; `retry-after` says when to retry, seconds. */
            429: {
                headers: {
                    /** @description Seconds to wait */
                    "retry-after"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `headers_too_large`: the request line and headers are over `--max-header-bytes`. */
            431: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `malformed`: a stored hash does not decode (a bug to report). */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unavailable`: Redis (and, for a degraded read, PostgreSQL) cannot answer; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
        };
    };
    batch_unread: {
        parameters: {
            query?: {
                /** @description Answer each count above this value as the value, with `"capped": true` beside it (the "99+" badge). */
                cap?: number;
                /**
                 * @description The instant to count at (RFC 3339, contract v3: unread that expires); default: the server's clock. For
                 *     audits and tests.
                 */
                now?: string;
            };
            header?: never;
            path?: never;
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["BatchRequest"];
            };
        };
        responses: {
            /** @description Every user's reader shape, in the order asked */
            200: {
                headers: {
                    /** @description The live namespace answered from */
                    "x-unread-namespace"?: string;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["BatchAnswer"];
                };
            };
            /**
             * @description `invalid_path`, `invalid_id` (an id breaking the contract's id rule), `invalid_query`, `invalid_body`, `too_many_ids` or
             *     `invalid_header`.
             */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unauthorized`: no bearer token, or one that does not verify (the `WWW-Authenticate: Bearer` header is set). */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `forbidden`: the token may not read this user (the same answer for every other user). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `timeout`: the request took longer than `--request-timeout`. */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `too_large`: the body is over `--max-body-bytes`. */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `rate_limited`: over the token's rate limit; `retry-after` says when to retry, seconds. */
            429: {
                headers: {
                    /** @description Seconds to wait */
                    "retry-after"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `headers_too_large`: the request line and headers are over `--max-header-bytes`. */
            431: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `malformed`: a stored hash does not decode (a bug to report). */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unavailable`: Redis (and, for a degraded read, PostgreSQL) cannot answer; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
        };
    };
    read_broadcast: {
        parameters: {
            query?: never;
            header?: {
                "Idempotency-Key"?: string;
            };
            path: {
                user_id: string;
                broadcast_id: string;
            };
            cookie?: never;
        };
        /** @description Optional `{"read_seq"}`; absent: the head */
        requestBody?: {
            content: {
                "application/json": components["schemas"]["BroadcastReadBody"] | null;
            };
        };
        responses: {
            /** @description Published: the ids of the events sent (the counts change once the fold has them) */
            202: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Accepted"];
                };
            };
            /**
             * @description `invalid_path`, `invalid_id` (an id breaking the contract's id rule), `invalid_query`, `invalid_body`, `too_many_ids` or
             *     `invalid_header`.
             */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unauthorized`: no bearer token, or one that does not verify (the `WWW-Authenticate: Bearer` header is set). */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `forbidden`: the token may not read this user (the same answer for every other user). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `timeout`: the request took longer than `--request-timeout`. */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `too_large`: the body is over `--max-body-bytes`. */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `rate_limited`: over the token's rate limit; `retry-after` says when to retry, seconds. */
            429: {
                headers: {
                    /** @description Seconds to wait */
                    "retry-after"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `headers_too_large`: the request line and headers are over `--max-header-bytes`. */
            431: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `malformed`: a stored hash does not decode (a bug to report). */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unavailable`: Redis (and, for a degraded read, PostgreSQL) cannot answer; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
        };
    };
    mark_unread: {
        parameters: {
            query?: never;
            header?: {
                /** @description Dedupes retries for 24 h */
                "Idempotency-Key"?: string;
            };
            path: {
                user_id: string;
                conversation_id: string;
            };
            cookie?: never;
        };
        /** @description Optional `{"from_seq"}` (unread from here) or `{"marked": false}`; absent: mark */
        requestBody?: {
            content: {
                "application/json": components["schemas"]["MarkUnreadBody"] | null;
            };
        };
        responses: {
            /** @description Published: the ids of the events sent (the counts change once the fold has them) */
            202: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Accepted"];
                };
            };
            /**
             * @description `invalid_path`, `invalid_id` (an id breaking the contract's id rule), `invalid_query`, `invalid_body`, `too_many_ids` or
             *     `invalid_header`.
             */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unauthorized`: no bearer token, or one that does not verify (the `WWW-Authenticate: Bearer` header is set). */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `forbidden`: the token may not read this user (the same answer for every other user). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `timeout`: the request took longer than `--request-timeout`. */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `too_large`: the body is over `--max-body-bytes`. */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `rate_limited`: over the token's rate limit; `retry-after` says when to retry, seconds. */
            429: {
                headers: {
                    /** @description Seconds to wait */
                    "retry-after"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `headers_too_large`: the request line and headers are over `--max-header-bytes`. */
            431: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `malformed`: a stored hash does not decode (a bug to report). */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unavailable`: Redis (and, for a degraded read, PostgreSQL) cannot answer; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
        };
    };
    mute_conversation: {
        parameters: {
            query?: never;
            header?: {
                /** @description Dedupes retries for 24 h */
                "Idempotency-Key"?: string;
            };
            path: {
                user_id: string;
                conversation_id: string;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["MuteBody"];
            };
        };
        responses: {
            /** @description Published: the ids of the events sent (the counts change once the fold has them) */
            202: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Accepted"];
                };
            };
            /**
             * @description `invalid_path`, `invalid_id` (an id breaking the contract's id rule), `invalid_query`, `invalid_body`, `too_many_ids` or
             *     `invalid_header`.
             */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unauthorized`: no bearer token, or one that does not verify (the `WWW-Authenticate: Bearer` header is set). */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `forbidden`: the token may not read this user (the same answer for every other user). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `timeout`: the request took longer than `--request-timeout`. */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `too_large`: the body is over `--max-body-bytes`. */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `rate_limited`: over the token's rate limit; `retry-after` says when to retry, seconds. */
            429: {
                headers: {
                    /** @description Seconds to wait */
                    "retry-after"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `headers_too_large`: the request line and headers are over `--max-header-bytes`. */
            431: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `malformed`: a stored hash does not decode (a bug to report). */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unavailable`: Redis (and, for a degraded read, PostgreSQL) cannot answer; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
        };
    };
    read_reactions: {
        parameters: {
            query?: never;
            header?: {
                /** @description Dedupes retries for 24 h */
                "Idempotency-Key"?: string;
            };
            path: {
                user_id: string;
                conversation_id: string;
            };
            cookie?: never;
        };
        /** @description Optional `{"read_seq"}`; absent: every reaction so far */
        requestBody?: {
            content: {
                "application/json": components["schemas"]["ReactionsReadBody"] | null;
            };
        };
        responses: {
            /** @description Published: the id of the event sent (the counts change once the fold has it) */
            202: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Accepted"];
                };
            };
            /**
             * @description `invalid_path`, `invalid_id` (an id breaking the contract's id rule), `invalid_query`, `invalid_body`, `too_many_ids` or
             *     `invalid_header`.
             */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unauthorized`: no bearer token, or one that does not verify (the `WWW-Authenticate: Bearer` header is set). */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `forbidden`: the token may not read this user (the same answer for every other user). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `timeout`: the request took longer than `--request-timeout`. */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `too_large`: the body is over `--max-body-bytes`. */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `rate_limited`: over the token's rate limit; `retry-after` says when to retry, seconds. */
            429: {
                headers: {
                    /** @description Seconds to wait */
                    "retry-after"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `headers_too_large`: the request line and headers are over `--max-header-bytes`. */
            431: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `malformed`: a stored hash does not decode (a bug to report). */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unavailable`: Redis (and, for a degraded read, PostgreSQL) cannot answer; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
        };
    };
    read_conversation: {
        parameters: {
            query?: never;
            header?: {
                /** @description Dedupes retries for 24 h */
                "Idempotency-Key"?: string;
            };
            path: {
                user_id: string;
                conversation_id: string;
            };
            cookie?: never;
        };
        /** @description Optional `{"read_seq"}`; absent: the newest */
        requestBody?: {
            content: {
                "application/json": components["schemas"]["ReadBody"] | null;
            };
        };
        responses: {
            /** @description Published: the ids of the events sent (the counts change once the fold has them) */
            202: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Accepted"];
                };
            };
            /**
             * @description `invalid_path`, `invalid_id` (an id breaking the contract's id rule), `invalid_query`, `invalid_body`, `too_many_ids` or
             *     `invalid_header`.
             */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unauthorized`: no bearer token, or one that does not verify (the `WWW-Authenticate: Bearer` header is set). */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `forbidden`: the token may not read this user (the same answer for every other user). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `timeout`: the request took longer than `--request-timeout`. */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `too_large`: the body is over `--max-body-bytes`. */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `rate_limited`: over the token's rate limit; `retry-after` says when to retry, seconds. */
            429: {
                headers: {
                    /** @description Seconds to wait */
                    "retry-after"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `headers_too_large`: the request line and headers are over `--max-header-bytes`. */
            431: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `malformed`: a stored hash does not decode (a bug to report). */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unavailable`: Redis (and, for a degraded read, PostgreSQL) cannot answer; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
        };
    };
    follow_thread: {
        parameters: {
            query?: never;
            header?: {
                /** @description Dedupes retries for 24 h */
                "Idempotency-Key"?: string;
            };
            path: {
                user_id: string;
                conversation_id: string;
                /** @description The thread's root seq */
                thread_root: number;
            };
            cookie?: never;
        };
        requestBody: {
            content: {
                "application/json": components["schemas"]["FollowBody"];
            };
        };
        responses: {
            /** @description Published: the id of the event sent (the counts change once the fold has it) */
            202: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Accepted"];
                };
            };
            /**
             * @description `invalid_path`, `invalid_id` (an id breaking the contract's id rule), `invalid_query`, `invalid_body`, `too_many_ids` or
             *     `invalid_header`.
             */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unauthorized`: no bearer token, or one that does not verify (the `WWW-Authenticate: Bearer` header is set). */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `forbidden`: the token may not read this user (the same answer for every other user). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `timeout`: the request took longer than `--request-timeout`. */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `too_large`: the body is over `--max-body-bytes`. */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `rate_limited`: over the token's rate limit; `retry-after` says when to retry, seconds. */
            429: {
                headers: {
                    /** @description Seconds to wait */
                    "retry-after"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `headers_too_large`: the request line and headers are over `--max-header-bytes`. */
            431: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `malformed`: a stored hash does not decode (a bug to report). */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unavailable`: Redis (and, for a degraded read, PostgreSQL) cannot answer; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
        };
    };
    read_thread: {
        parameters: {
            query?: never;
            header?: {
                /** @description Dedupes retries for 24 h */
                "Idempotency-Key"?: string;
            };
            path: {
                user_id: string;
                conversation_id: string;
                /** @description The thread's root seq */
                thread_root: number;
            };
            cookie?: never;
        };
        /** @description Optional `{"read_seq"}`; absent: the whole thread */
        requestBody?: {
            content: {
                "application/json": components["schemas"]["ThreadReadBody"] | null;
            };
        };
        responses: {
            /** @description Published: the id of the event sent (the counts change once the fold has it) */
            202: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Accepted"];
                };
            };
            /**
             * @description `invalid_path`, `invalid_id` (an id breaking the contract's id rule), `invalid_query`, `invalid_body`, `too_many_ids` or
             *     `invalid_header`.
             */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unauthorized`: no bearer token, or one that does not verify (the `WWW-Authenticate: Bearer` header is set). */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `forbidden`: the token may not read this user (the same answer for every other user). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `timeout`: the request took longer than `--request-timeout`. */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `too_large`: the body is over `--max-body-bytes`. */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `rate_limited`: over the token's rate limit; `retry-after` says when to retry, seconds. */
            429: {
                headers: {
                    /** @description Seconds to wait */
                    "retry-after"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `headers_too_large`: the request line and headers are over `--max-header-bytes`. */
            431: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `malformed`: a stored hash does not decode (a bug to report). */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unavailable`: Redis (and, for a degraded read, PostgreSQL) cannot answer; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
        };
    };
    conversation_unread: {
        parameters: {
            query?: {
                /** @description Answer each count above this value as the value, with `"capped": true` beside it (the "99+" badge). */
                cap?: number;
                /**
                 * @description The instant to count at (RFC 3339, contract v3: unread that expires); default: the server's clock. For
                 *     audits and tests.
                 */
                now?: string;
            };
            header?: never;
            path: {
                /** @description The user, percent-encoded (CONTRACT.md id rule) */
                user_id: string;
                /** @description The conversation, percent-encoded */
                conversation_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The conversation's counts */
            200: {
                headers: {
                    /** @description The live namespace answered from */
                    "x-unread-namespace"?: string;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ConversationAnswer"];
                };
            };
            /**
             * @description `invalid_path`, `invalid_id` (an id breaking the contract's id rule), `invalid_query`, `invalid_body`, `too_many_ids` or
             *     `invalid_header`.
             */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unauthorized`: no bearer token, or one that does not verify (the `WWW-Authenticate: Bearer` header is set). */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `forbidden`: the token may not read this user (the same answer for every other user). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `timeout`: the request took longer than `--request-timeout`. */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `too_large`: the body is over `--max-body-bytes`. */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `rate_limited`: over the token's rate limit; `retry-after` says when to retry, seconds. */
            429: {
                headers: {
                    /** @description Seconds to wait */
                    "retry-after"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `headers_too_large`: the request line and headers are over `--max-header-bytes`. */
            431: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `malformed`: a stored hash does not decode (a bug to report). */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unavailable`: Redis (and, for a degraded read, PostgreSQL) cannot answer; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
        };
    };
    read_feed: {
        parameters: {
            query?: never;
            header?: {
                "Idempotency-Key"?: string;
            };
            path: {
                user_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description One event id per timeline acked (none when nothing was unread) */
            202: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Accepted"];
                };
            };
            /**
             * @description `invalid_path`, `invalid_id` (an id breaking the contract's id rule), `invalid_query`, `invalid_body`, `too_many_ids` or
             *     `invalid_header`.
             */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unauthorized`: no bearer token, or one that does not verify (the `WWW-Authenticate: Bearer` header is set). */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `forbidden`: the token may not read this user (the same answer for every other user). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `timeout`: the request took longer than `--request-timeout`. */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `too_large`: the body is over `--max-body-bytes`. */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `rate_limited`: over the token's rate limit; `retry-after` says when to retry, seconds. */
            429: {
                headers: {
                    /** @description Seconds to wait */
                    "retry-after"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `headers_too_large`: the request line and headers are over `--max-header-bytes`. */
            431: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `malformed`: a stored hash does not decode (a bug to report). */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unavailable`: Redis (and, for a degraded read, PostgreSQL) cannot answer; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
        };
    };
    notifications_read: {
        parameters: {
            query?: never;
            header?: {
                "Idempotency-Key"?: string;
            };
            path: {
                user_id: string;
            };
            cookie?: never;
        };
        /** @description Optional: `{"category"}`; absent: all */
        requestBody?: {
            content: {
                "application/json": components["schemas"]["CategoryBody"] | null;
            };
        };
        responses: {
            /** @description Published: the ids of the events sent (the counts change once the fold has them) */
            202: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Accepted"];
                };
            };
            /**
             * @description `invalid_path`, `invalid_id` (an id breaking the contract's id rule), `invalid_query`, `invalid_body`, `too_many_ids` or
             *     `invalid_header`.
             */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unauthorized`: no bearer token, or one that does not verify (the `WWW-Authenticate: Bearer` header is set). */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `forbidden`: the token may not read this user (the same answer for every other user). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `timeout`: the request took longer than `--request-timeout`. */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `too_large`: the body is over `--max-body-bytes`. */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `rate_limited`: over the token's rate limit; `retry-after` says when to retry, seconds. */
            429: {
                headers: {
                    /** @description Seconds to wait */
                    "retry-after"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `headers_too_large`: the request line and headers are over `--max-header-bytes`. */
            431: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `malformed`: a stored hash does not decode (a bug to report). */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unavailable`: Redis (and, for a degraded read, PostgreSQL) cannot answer; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
        };
    };
    notifications_seen: {
        parameters: {
            query?: never;
            header?: {
                "Idempotency-Key"?: string;
            };
            path: {
                user_id: string;
            };
            cookie?: never;
        };
        /** @description Optional: `{"category"}`; absent: all */
        requestBody?: {
            content: {
                "application/json": components["schemas"]["CategoryBody"] | null;
            };
        };
        responses: {
            /** @description Published: the ids of the events sent (the counts change once the fold has them) */
            202: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Accepted"];
                };
            };
            /**
             * @description `invalid_path`, `invalid_id` (an id breaking the contract's id rule), `invalid_query`, `invalid_body`, `too_many_ids` or
             *     `invalid_header`.
             */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unauthorized`: no bearer token, or one that does not verify (the `WWW-Authenticate: Bearer` header is set). */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `forbidden`: the token may not read this user (the same answer for every other user). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `timeout`: the request took longer than `--request-timeout`. */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `too_large`: the body is over `--max-body-bytes`. */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `rate_limited`: over the token's rate limit; `retry-after` says when to retry, seconds. */
            429: {
                headers: {
                    /** @description Seconds to wait */
                    "retry-after"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `headers_too_large`: the request line and headers are over `--max-header-bytes`. */
            431: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `malformed`: a stored hash does not decode (a bug to report). */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unavailable`: Redis (and, for a degraded read, PostgreSQL) cannot answer; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
        };
    };
    read_notification: {
        parameters: {
            query?: never;
            header?: {
                /** @description Dedupes retries for 24 h */
                "Idempotency-Key"?: string;
            };
            path: {
                user_id: string;
                notification_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description Published: the ids of the events sent (the counts change once the fold has them) */
            202: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Accepted"];
                };
            };
            /**
             * @description `invalid_path`, `invalid_id` (an id breaking the contract's id rule), `invalid_query`, `invalid_body`, `too_many_ids` or
             *     `invalid_header`.
             */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unauthorized`: no bearer token, or one that does not verify (the `WWW-Authenticate: Bearer` header is set). */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `forbidden`: the token may not read this user (the same answer for every other user). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `timeout`: the request took longer than `--request-timeout`. */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `too_large`: the body is over `--max-body-bytes`. */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `rate_limited`: over the token's rate limit; `retry-after` says when to retry, seconds. */
            429: {
                headers: {
                    /** @description Seconds to wait */
                    "retry-after"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `headers_too_large`: the request line and headers are over `--max-header-bytes`. */
            431: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `malformed`: a stored hash does not decode (a bug to report). */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unavailable`: Redis (and, for a degraded read, PostgreSQL) cannot answer; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
        };
    };
    read_all: {
        parameters: {
            query?: never;
            header?: {
                "Idempotency-Key"?: string;
            };
            path: {
                user_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description One event id per conversation acked (none when nothing was unread) */
            202: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["Accepted"];
                };
            };
            /**
             * @description `invalid_path`, `invalid_id` (an id breaking the contract's id rule), `invalid_query`, `invalid_body`, `too_many_ids` or
             *     `invalid_header`.
             */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unauthorized`: no bearer token, or one that does not verify (the `WWW-Authenticate: Bearer` header is set). */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `forbidden`: the token may not read this user (the same answer for every other user). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `timeout`: the request took longer than `--request-timeout`. */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `too_large`: the body is over `--max-body-bytes`. */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `rate_limited`: over the token's rate limit; `retry-after` says when to retry, seconds. */
            429: {
                headers: {
                    /** @description Seconds to wait */
                    "retry-after"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `headers_too_large`: the request line and headers are over `--max-header-bytes`. */
            431: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `malformed`: a stored hash does not decode (a bug to report). */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unavailable`: Redis (and, for a degraded read, PostgreSQL) cannot answer; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
        };
    };
    stream: {
        parameters: {
            query?: {
                /**
                 * @description The version the client last applied: the first message is then an empty `changes` when it is current, the
                 *     whole state otherwise.
                 */
                since?: number;
                /** @description The bearer token, for clients that cannot set a header (browsers' `WebSocket` and `EventSource`). */
                access_token?: string;
            };
            header: {
                /** @description `text/event-stream` for Server-Sent Events; a WebSocket client sends an upgrade instead (`Connection: Upgrade`, `Upgrade: websocket`), which OpenAPI cannot describe. Neither: 406 */
                Accept: string;
            };
            path: {
                /** @description The user, percent-encoded */
                user_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description WebSocket (`Upgrade: websocket`): one JSON message per text frame; at the token's `exp` plus the leeway a last `{"type":"closing","reason":"token_expired"}` and close code 4001, unless the client sent `{"type":"refresh","token"}` before (docs/api.md § Stream) */
            101: {
                headers: {
                    [name: string]: unknown;
                };
                content?: never;
            };
            /** @description Server-Sent Events (`Accept: text/event-stream`): one JSON message per event, its `id` the version; ends after a last `closing` message when the token expires */
            200: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "text/event-stream": unknown;
                };
            };
            /**
             * @description `invalid_path`, `invalid_id` (an id breaking the contract's id rule), `invalid_query`, `invalid_body`, `too_many_ids` or
             *     `invalid_header`.
             */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unauthorized`: no bearer token, or one that does not verify (the `WWW-Authenticate: Bearer` header is set). */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `forbidden`: the token may not read this user (the same answer for every other user). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `not_a_stream`: neither a WebSocket upgrade nor `text/event-stream` */
            406: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `timeout`: the request took longer than `--request-timeout`. */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `too_large`: the body is over `--max-body-bytes`. */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `rate_limited`: over the token's rate limit; `retry-after` says when to retry, seconds. */
            429: {
                headers: {
                    /** @description Seconds to wait */
                    "retry-after"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `headers_too_large`: the request line and headers are over `--max-header-bytes`. */
            431: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `malformed`: a stored hash does not decode (a bug to report). */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unavailable`: Redis (and, for a degraded read, PostgreSQL) cannot answer; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
        };
    };
    list_threads: {
        parameters: {
            query?: {
                /** @description Threads per page, 1 to 1,000 (default 100). */
                limit?: number;
                /** @description The `next` of the previous page (absent: the first page): `{root}:{conversation_id}`. */
                after?: string;
                /** @description The instant to count at (RFC 3339); default: the server's clock. */
                now?: string;
            };
            header?: never;
            path: {
                /** @description The user, percent-encoded (CONTRACT.md id rule) */
                user_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description One page; `next` is the `after` of the following page, null on the last */
            200: {
                headers: {
                    /** @description The live namespace answered from */
                    "x-unread-namespace"?: string;
                    /** @description `redis` or `checkpoint` */
                    "x-unread-source"?: string;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ThreadPage"];
                };
            };
            /**
             * @description `invalid_path`, `invalid_id` (an id breaking the contract's id rule), `invalid_query`, `invalid_body`, `too_many_ids` or
             *     `invalid_header`.
             */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unauthorized`: no bearer token, or one that does not verify (the `WWW-Authenticate: Bearer` header is set). */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `forbidden`: the token may not read this user (the same answer for every other user). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `timeout`: the request took longer than `--request-timeout`. */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `too_large`: the body is over `--max-body-bytes`. */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `rate_limited`: over the token's rate limit; `retry-after` says when to retry, seconds. */
            429: {
                headers: {
                    /** @description Seconds to wait */
                    "retry-after"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `headers_too_large`: the request line and headers are over `--max-header-bytes`. */
            431: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `malformed`: a stored hash does not decode (a bug to report). */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unavailable`: Redis (and, for a degraded read, PostgreSQL) cannot answer; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
        };
    };
    user_unread: {
        parameters: {
            query?: {
                /** @description Answer each count above this value as the value, with `"capped": true` beside it (the "99+" badge). */
                cap?: number;
                /**
                 * @description The instant to count at (RFC 3339, contract v3: unread that expires); default: the server's clock. For
                 *     audits and tests.
                 */
                now?: string;
            };
            header?: never;
            path: {
                /** @description The user, percent-encoded (CONTRACT.md id rule) */
                user_id: string;
            };
            cookie?: never;
        };
        requestBody?: never;
        responses: {
            /** @description The reader shape; `"stale": true` when read from the checkpoint while Redis is down; `"capped": true` beside a count cut to `cap` */
            200: {
                headers: {
                    /** @description The live namespace answered from */
                    "x-unread-namespace"?: string;
                    /** @description `redis` or `checkpoint` */
                    "x-unread-source"?: string;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["UserView"];
                };
            };
            /**
             * @description `invalid_path`, `invalid_id` (an id breaking the contract's id rule), `invalid_query`, `invalid_body`, `too_many_ids` or
             *     `invalid_header`.
             */
            400: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unauthorized`: no bearer token, or one that does not verify (the `WWW-Authenticate: Bearer` header is set). */
            401: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `forbidden`: the token may not read this user (the same answer for every other user). */
            403: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `timeout`: the request took longer than `--request-timeout`. */
            408: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `too_large`: the body is over `--max-body-bytes`. */
            413: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `rate_limited`: over the token's rate limit; `retry-after` says when to retry, seconds. */
            429: {
                headers: {
                    /** @description Seconds to wait */
                    "retry-after"?: number;
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `headers_too_large`: the request line and headers are over `--max-header-bytes`. */
            431: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `malformed`: a stored hash does not decode (a bug to report). */
            500: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
            /** @description `unavailable`: Redis (and, for a degraded read, PostgreSQL) cannot answer; retry later. */
            503: {
                headers: {
                    [name: string]: unknown;
                };
                content: {
                    "application/json": components["schemas"]["ErrorBody"];
                };
            };
        };
    };
}
