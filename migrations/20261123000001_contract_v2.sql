-- Contract v2 (src/checkpoint/, src/core/broadcast.rs, src/core/notifications.rs). Existing rows stay valid: a
-- version-1 user row still decodes (as a user with no feed, broadcast or notification state).

-- Broadcast lists, kept once by the fan-out (never per user): head and live seqs (version byte + postcard).
-- A list and a conversation may share an id: they are separate namespaces, hence a table of their own.
CREATE TABLE IF NOT EXISTS fanout_lists (
    broadcast_id text        PRIMARY KEY,
    partition    integer     NOT NULL,
    state        bytea       NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS fanout_lists_partition ON fanout_lists (partition);

-- A user's remembered notifications, one row each, so that a flush writes the notifications that changed and not
-- the user's whole history (the per-category counts live in the user's own row of fold_users).
CREATE TABLE IF NOT EXISTS fold_notifications (
    user_id         text        NOT NULL,
    notification_id text        NOT NULL,
    partition       integer     NOT NULL,
    state           bytea       NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, notification_id)
);
CREATE INDEX IF NOT EXISTS fold_notifications_partition ON fold_notifications (partition);
