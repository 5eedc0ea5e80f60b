-- Money: the price catalog's versions and the cost of usage (projections/prices.py;
-- docs/tables.md).

-- Every PriceCatalogPublished event of the prices topic, in its order (seq); refused
-- ones too, with why (problems), so an operator sees what the fold kept out.
CREATE TABLE price_catalogs (
    event_id                text PRIMARY KEY,
    seq                     integer NOT NULL UNIQUE,
    version                 integer NOT NULL,
    currency                text NOT NULL,
    published_at            timestamptz NOT NULL,
    source                  text NOT NULL DEFAULT '',
    accepted                boolean NOT NULL,
    problems                jsonb NOT NULL DEFAULT '[]',
    payload                 jsonb NOT NULL
);

-- Each hour's piece at the price in force in that hour (NULL version: no price).
ALTER TABLE usage_lines ADD COLUMN price_version integer;
ALTER TABLE usage_lines ADD COLUMN per_gpu_hour_micros bigint;
ALTER TABLE usage_lines ADD COLUMN billable_cost_nanos bigint NOT NULL DEFAULT 0;
ALTER TABLE usage_lines ADD COLUMN credited_cost_nanos bigint NOT NULL DEFAULT 0;

-- A job's money: the sum of its usage lines.
ALTER TABLE accounting_records ADD COLUMN currency text NOT NULL DEFAULT '';
ALTER TABLE accounting_records ADD COLUMN billable_cost_nanos bigint NOT NULL DEFAULT 0;
ALTER TABLE accounting_records ADD COLUMN credited_cost_nanos bigint NOT NULL DEFAULT 0;
ALTER TABLE accounting_records ADD COLUMN unpriced_gpu_us bigint NOT NULL DEFAULT 0;
ALTER TABLE accounting_records ADD COLUMN price_versions integer[] NOT NULL DEFAULT '{}';
