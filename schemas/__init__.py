"""gridledger schemas: the job spec, the events, the views, their Avro schemas and the codec.

Imports only the standard library, pydantic and fastavro. Import the modules themselves
(``schemas.events``, ``schemas.spec``, ``schemas.codec``, ...): this package re-exports
nothing, so ``schemas.errors`` loads without the models (the CLI's ``--help``).
"""
