-- Checkpoint tables (design of issue 2, written by the service): state and the input offsets it reflects are
-- written in one transaction, so after a crash a stage resumes from exactly the state its offsets describe.

-- Where each stage resumes, per input partition: the next offset to process.
CREATE TABLE IF NOT EXISTS checkpoint_offsets (
    stage       text        NOT NULL CHECK (stage IN ('fanout', 'fold')),
    topic       text        NOT NULL,
    partition   integer     NOT NULL CHECK (partition >= 0),
    next_offset bigint      NOT NULL CHECK (next_offset >= 0),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (stage, topic, partition)
);

-- The fan-out's state per conversation: src/checkpoint.rs encode_conversation (version byte + postcard).
CREATE TABLE IF NOT EXISTS fanout_conversations (
    conversation_id text        PRIMARY KEY,
    partition       integer     NOT NULL,
    state           bytea       NOT NULL,
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS fanout_conversations_partition ON fanout_conversations (partition);

-- The fold's state per user: src/checkpoint.rs encode_user (version byte + postcard).
CREATE TABLE IF NOT EXISTS fold_users (
    user_id    text        PRIMARY KEY,
    partition  integer     NOT NULL,
    state      bytea       NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS fold_users_partition ON fold_users (partition);
