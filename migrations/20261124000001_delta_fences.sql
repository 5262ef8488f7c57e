-- The fold's fence against zombie deltas (src/core/delta.rs, Fence): per fold partition (of unread.user-deltas) and
-- fan-out partition (of unread.conversation-events), the newest fan-out lease generation seen in that fold
-- partition's deltas. Written in the fold's checkpoint transaction, with its offsets.
CREATE TABLE IF NOT EXISTS fold_delta_fences (
    partition        integer     NOT NULL,
    source_partition integer     NOT NULL,
    generation       bigint      NOT NULL,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (partition, source_partition)
);
