-- A fold partition's replies of one read-diffused conversation (src/core/threads.rs, Replies), a chunk of 4,096
-- seqs per row: the replies a member counts when it follows a thread later. A read-diffused conversation's replies
-- reach each fold partition once, not in every member's delta, so the members' rows do not hold them all. Written
-- in the fold's checkpoint transaction, with its offsets, when the chunk changes (src/state/codec.rs
-- encode_replies: version byte + postcard).
CREATE TABLE IF NOT EXISTS fold_replies (
    partition       integer     NOT NULL,
    conversation_id text        NOT NULL,
    chunk           bigint      NOT NULL,
    state           bytea       NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (partition, conversation_id, chunk)
);
