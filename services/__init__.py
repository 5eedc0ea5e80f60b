"""gridledger services: the adapters around the pure core (Kafka, Postgres, Docker, HTTP)."""
