-- Usage a billing system can consume (projections/usage.py; docs/tables.md).

-- AccountingRecord v3: the spec's labels, and where each attempt ran.
ALTER TABLE accounting_records ADD COLUMN labels jsonb NOT NULL DEFAULT '{}';
ALTER TABLE accounting_attempts ADD COLUMN provider text NOT NULL DEFAULT '';
ALTER TABLE accounting_attempts ADD COLUMN region text NOT NULL DEFAULT '';

-- One row per attempt and UTC hour it used: projections.usage.split(record, ticks,
-- "hour"), rewritten with the record. Times in whole microseconds; a day or a month
-- is the sum of its hours.
CREATE TABLE usage_lines (
    job_id                  text NOT NULL,
    attempt                 integer NOT NULL,
    period_start            timestamptz NOT NULL,
    tenant                  text NOT NULL DEFAULT '',
    labels                  jsonb NOT NULL DEFAULT '{}',
    provider                text NOT NULL DEFAULT '',
    region                  text NOT NULL DEFAULT '',
    gpu_model               text NOT NULL DEFAULT '',
    held_us                 bigint NOT NULL,
    gpu_us                  bigint NOT NULL,
    metered_gpu_us          bigint NOT NULL,
    billable_gpu_us         bigint NOT NULL,
    credited_gpu_us         bigint NOT NULL,
    final                   boolean NOT NULL,
    PRIMARY KEY (job_id, attempt, period_start)
);
CREATE INDEX usage_by_tenant ON usage_lines (tenant, period_start);
