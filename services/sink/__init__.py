"""The Postgres sink: read models for queries and billing consumers, derived from the ledger.

See ``docs/tables.md`` for the tables as a contract.
"""
