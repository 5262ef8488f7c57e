-- Fencing: each partition task takes the next generation of its (stage, partition) lease when it starts; every
-- checkpoint transaction locks the lease row and aborts unless the generation is still the task's own. A paused
-- instance whose partitions moved (and that resumes before noticing) can therefore never commit older state.
CREATE TABLE IF NOT EXISTS partition_leases (
    stage       text        NOT NULL CHECK (stage IN ('fanout', 'fold')),
    partition   integer     NOT NULL CHECK (partition >= 0),
    generation  bigint      NOT NULL,
    owner       text        NOT NULL,
    acquired_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (stage, partition)
);
