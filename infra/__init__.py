"""The local stack: Kafka from Maven jars, a Postgres cluster, a Docker daemon, local images."""
