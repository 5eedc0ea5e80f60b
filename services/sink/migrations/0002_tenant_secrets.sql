-- Per-tenant secrets (services/secretstore.py). Owned by the API, not derived from the
-- ledger: replay neither rebuilds nor compares this table, and the sink never writes it.
-- `sealed` is AES-256-GCM ciphertext (format byte, key id, nonce, ciphertext and tag);
-- no column ever holds a value in the clear.
CREATE TABLE tenant_secrets (
    tenant          text NOT NULL,
    name            text NOT NULL,
    sealed          bytea NOT NULL,
    value_bytes     integer NOT NULL,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    PRIMARY KEY (tenant, name)
);
