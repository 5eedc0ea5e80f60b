-- gridledger read models: the contract for billing consumers and queries.
-- Applied by services/sink/migrate.py inside the configured schema (search_path),
-- recorded in schema_migrations. Never edit an applied migration: add a new file.
-- Every row is derived from the ledger by the sink; nothing here is written by hand.

-- One row per job: the current JobView (projections.job_state) as columns + jsonb.
CREATE TABLE jobs (
    job_id          text PRIMARY KEY,
    tenant          text NOT NULL DEFAULT '',
    name            text NOT NULL DEFAULT '',
    status          text NOT NULL,
    terminal        boolean NOT NULL DEFAULT false,
    attempt         integer NOT NULL DEFAULT 0,
    image           text NOT NULL DEFAULT '',
    gpus            integer NOT NULL DEFAULT 0,
    submitted_at    timestamptz,
    updated_at      timestamptz,
    terminal_at     timestamptz,
    terminal_event  text NOT NULL DEFAULT '',
    failure_class   text NOT NULL DEFAULT '',
    attribution     text NOT NULL DEFAULT '',
    retryable       boolean,
    summary         text NOT NULL DEFAULT '',
    advice          text NOT NULL DEFAULT '',
    event_count     integer NOT NULL DEFAULT 0,
    view            jsonb NOT NULL
);
CREATE INDEX jobs_by_tenant ON jobs (tenant, submitted_at DESC, job_id DESC);
CREATE INDEX jobs_by_status ON jobs (status);

-- One row per attempt of a job, from the JobView's attempts.
CREATE TABLE attempts (
    job_id          text NOT NULL,
    attempt         integer NOT NULL,
    status          text NOT NULL,
    node_id         text NOT NULL DEFAULT '',
    provider        text NOT NULL DEFAULT '',
    region          text NOT NULL DEFAULT '',
    gpu_count       integer NOT NULL DEFAULT 0,
    gpu_model       text NOT NULL DEFAULT '',
    scheduled_at    timestamptz,
    accepted_at     timestamptz,
    held_from       timestamptz,
    released_at     timestamptz,
    started_at      timestamptz,
    exited_at       timestamptz,
    exit_code       integer,
    signal          integer,
    oom_killed      boolean,
    runtime_s       double precision,
    failure_class   text NOT NULL DEFAULT '',
    attribution     text NOT NULL DEFAULT '',
    view            jsonb NOT NULL,
    PRIMARY KEY (job_id, attempt)
);

-- Every lifecycle event of gridledger.job-events, append-only, each event once.
-- seq is the event's position in the job's de-duplicated history (1, 2, ...).
CREATE TABLE job_events (
    event_id        text PRIMARY KEY,
    job_id          text NOT NULL,
    seq             integer NOT NULL,
    attempt         integer NOT NULL,
    type            text NOT NULL,
    occurred_at     timestamptz NOT NULL,
    producer        text NOT NULL DEFAULT '',
    causation_id    text,
    schema_version  integer NOT NULL,
    payload         jsonb NOT NULL,
    UNIQUE (job_id, seq)
);

-- Each failure classification the job's view took on (FailureClassified, rejections),
-- keyed by the event that produced it. The job's current one is also on jobs.
CREATE TABLE failures (
    event_id            text PRIMARY KEY,
    job_id              text NOT NULL,
    attempt             integer NOT NULL,
    failure_class       text NOT NULL,
    attribution         text NOT NULL,
    retryable           boolean NOT NULL,
    summary             text NOT NULL,
    advice              text NOT NULL,
    rule_id             text NOT NULL,
    classifier_version  text NOT NULL,
    evidence            jsonb NOT NULL,
    occurred_at         timestamptz NOT NULL
);
CREATE INDEX failures_by_job ON failures (job_id, attempt);

-- One row per job: projections.accounting.account(history, ticks, policy).
CREATE TABLE accounting_records (
    job_id                  text PRIMARY KEY,
    tenant                  text NOT NULL DEFAULT '',
    status                  text NOT NULL,
    final                   boolean NOT NULL,
    policy_version          text NOT NULL,
    held_seconds            double precision NOT NULL,
    gpu_seconds             double precision NOT NULL,
    metered_gpu_seconds     double precision NOT NULL,
    billable_gpu_seconds    double precision NOT NULL,
    credited_gpu_seconds    double precision NOT NULL,
    reconciled              boolean NOT NULL,
    updated_at              timestamptz,
    record                  jsonb NOT NULL
);
CREATE INDEX accounting_by_tenant ON accounting_records (tenant, final);

-- The per-attempt lines of each accounting record.
CREATE TABLE accounting_attempts (
    job_id                  text NOT NULL,
    attempt                 integer NOT NULL,
    node_id                 text NOT NULL DEFAULT '',
    held_from               timestamptz,
    released_at             timestamptz,
    held_seconds            double precision NOT NULL,
    gpu_count               integer NOT NULL,
    gpu_model               text NOT NULL DEFAULT '',
    gpu_seconds             double precision NOT NULL,
    metered_gpu_seconds     double precision NOT NULL,
    tick_count              integer NOT NULL,
    missing_ticks           integer[] NOT NULL,
    attribution             text NOT NULL DEFAULT '',
    failure_class           text NOT NULL DEFAULT '',
    billable_gpu_seconds    double precision NOT NULL,
    credited_gpu_seconds    double precision NOT NULL,
    reconciled              boolean NOT NULL,
    PRIMARY KEY (job_id, attempt)
);

-- Log chunks (gridledger.log-chunks), so logs outlive topic retention.
CREATE TABLE log_chunks (
    job_id          text NOT NULL,
    attempt         integer NOT NULL,
    stream          text NOT NULL,
    seq             integer NOT NULL,
    event_id        text NOT NULL,
    first_line      integer NOT NULL,
    line_count      integer NOT NULL,
    data            text NOT NULL,
    truncated       boolean NOT NULL,
    occurred_at     timestamptz NOT NULL,
    PRIMARY KEY (job_id, attempt, stream, seq)
);

-- Meter ticks (gridledger.meter-ticks); a tick index counts once.
CREATE TABLE meter_ticks (
    job_id          text NOT NULL,
    attempt         integer NOT NULL,
    tick_index      integer NOT NULL,
    event_id        text NOT NULL,
    node_id         text NOT NULL,
    interval_start  timestamptz NOT NULL,
    interval_s      double precision NOT NULL,
    gpu_count       integer NOT NULL,
    gpu_model       text NOT NULL DEFAULT '',
    gpu_seconds     double precision NOT NULL,
    final           boolean NOT NULL,
    occurred_at     timestamptz NOT NULL,
    payload         jsonb NOT NULL,
    PRIMARY KEY (job_id, attempt, tick_index)
);

-- Every node event (gridledger.node-events), append-only, each event once.
CREATE TABLE node_events (
    event_id        text PRIMARY KEY,
    node_id         text NOT NULL,
    seq             integer NOT NULL,
    type            text NOT NULL,
    occurred_at     timestamptz NOT NULL,
    payload         jsonb NOT NULL,
    UNIQUE (node_id, seq)
);

-- The fleet: one row per node, folded from its node events.
CREATE TABLE nodes (
    node_id             text PRIMARY KEY,
    status              text NOT NULL,
    provider            text NOT NULL DEFAULT '',
    region              text NOT NULL DEFAULT '',
    inventory_source    text NOT NULL DEFAULT '',
    inventory_note      text NOT NULL DEFAULT '',
    gpus                jsonb NOT NULL,
    host_memory_mb      integer NOT NULL DEFAULT 0,
    agent_version       text NOT NULL DEFAULT '',
    heartbeat_interval_s double precision NOT NULL DEFAULT 0,
    registered_at       timestamptz,
    last_heartbeat_at   timestamptz,
    last_heartbeat_seq  integer,
    free_gpu_indices    integer[] NOT NULL,
    running_attempts    text[] NOT NULL,
    gpu_usage           jsonb NOT NULL,
    drained_at          timestamptz,
    drain_reason        text NOT NULL DEFAULT ''
);

-- Where each consumer is, written in the same transaction as the rows it caused.
-- next_offset is the next Kafka offset to read; the sink seeks here on start.
CREATE TABLE consumer_offsets (
    consumer        text NOT NULL,
    topic           text NOT NULL,
    partition       integer NOT NULL,
    next_offset     bigint NOT NULL,
    PRIMARY KEY (consumer, topic, partition)
);
