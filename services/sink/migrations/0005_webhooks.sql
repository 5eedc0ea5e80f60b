-- Tenants' webhook subscriptions and their deliveries (services/webhooks). Owned by the API
-- (subscriptions) and the webhooks service (the rest), not derived from the ledger: replay
-- neither rebuilds nor compares these tables, and the sink never writes them. Signing
-- secrets are sealed like tenant secrets (services/secretstore.py): no column holds one in
-- the clear.
CREATE TABLE webhook_subscriptions (
    id                    text PRIMARY KEY,
    tenant                text NOT NULL,
    url                   text NOT NULL,
    events                text[] NOT NULL,
    sealed                bytea NOT NULL,
    sealed_previous       bytea,
    previous_until        timestamptz,
    created_at            timestamptz NOT NULL,
    rotated_at            timestamptz,
    enabled               boolean NOT NULL DEFAULT true,
    disabled_at           timestamptz,
    disabled_reason       text NOT NULL DEFAULT '',
    consecutive_failures  integer NOT NULL DEFAULT 0,
    retry_at              timestamptz NOT NULL DEFAULT '-infinity'
);
CREATE INDEX webhook_subscriptions_tenant ON webhook_subscriptions (tenant);

-- Each job's tenant, as its first JobSubmitted says (a resubmission is ignored, as in the
-- folds), written with the consumed offsets.
CREATE TABLE webhook_job_tenants (
    job_id      text PRIMARY KEY,
    tenant      text NOT NULL,
    event_id    text NOT NULL
);

-- Events waiting for delivery, one row per subscription and event; gone once delivered.
CREATE TABLE webhook_outbox (
    seq              bigserial PRIMARY KEY,
    subscription_id  text NOT NULL REFERENCES webhook_subscriptions (id) ON DELETE CASCADE,
    event_id         text NOT NULL,
    event_type       text NOT NULL,
    body             text NOT NULL,
    attempts         integer NOT NULL DEFAULT 0,
    enqueued_at      timestamptz NOT NULL,
    UNIQUE (subscription_id, event_id)
);

-- The latest attempts per subscription (bounded by webhooks_log_keep).
CREATE TABLE webhook_deliveries (
    seq              bigserial PRIMARY KEY,
    subscription_id  text NOT NULL REFERENCES webhook_subscriptions (id) ON DELETE CASCADE,
    event_id         text NOT NULL,
    event_type       text NOT NULL,
    attempt          integer NOT NULL,
    at               timestamptz NOT NULL,
    status_code      integer,
    latency_ms       integer NOT NULL,
    ok               boolean NOT NULL,
    error            text NOT NULL DEFAULT ''
);
CREATE INDEX webhook_deliveries_subscription ON webhook_deliveries (subscription_id, seq);
