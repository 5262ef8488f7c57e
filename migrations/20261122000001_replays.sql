-- `unread replay --into NAMESPACE` (src/replay.rs): one row per namespace schema that a replay filled. A replay
-- writes it when it starts and sets finished_at when it reached the log end it aimed at; `unread promote` refuses
-- a namespace whose replay is unfinished. The state itself lives in the usual checkpoint tables.
CREATE TABLE IF NOT EXISTS replays (
    id          smallint    PRIMARY KEY DEFAULT 1 CHECK (id = 1),
    source      text        NOT NULL,
    from_spec   text        NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    events      bigint      NOT NULL DEFAULT 0
);
