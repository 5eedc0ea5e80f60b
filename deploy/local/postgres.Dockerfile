# Postgres 15 from Debian's package, initialised from POSTGRES_* like the postgres image.
FROM gridledger/python:latest
RUN apt-get update -q && apt-get install -y -q --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/*
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
COPY postgres-entrypoint.sh /entrypoint.sh
ENTRYPOINT ["/bin/sh", "/entrypoint.sh"]
