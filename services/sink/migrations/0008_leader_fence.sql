-- The schedulers' fence markers on job-events (projections/fence.py; docs/tables.md):
-- a sink that resumes at its committed offsets judges the scheduler decisions it reads
-- against the epochs announced before them, which it cannot re-read.
CREATE TABLE leader_fence (
    partition               integer NOT NULL,
    from_offset             bigint NOT NULL,
    epoch                   bigint NOT NULL,
    PRIMARY KEY (partition, from_offset)
);
