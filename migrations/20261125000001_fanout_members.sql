-- A conversation's members, one row each (issue 21: a join or a leave writes O(1) checkpoint bytes, not the member
-- list). Written in the fan-out's checkpoint transaction with the conversation's row (version 6 on, which no longer
-- holds its members), its partition's offset and lease check. Rows of versions 1 to 5 still hold their members;
-- the first checkpoint that rewrites such a conversation moves them here (src/state/load.rs).
CREATE TABLE IF NOT EXISTS fanout_members (
    conversation_id text        NOT NULL,
    user_id         text        NOT NULL,
    partition       integer     NOT NULL,
    -- The conversation's head when the member (last) joined.
    joined_head     bigint      NOT NULL,
    PRIMARY KEY (conversation_id, user_id)
);
CREATE INDEX IF NOT EXISTS fanout_members_partition ON fanout_members (partition);
