# One image for every gridledger service (api, scheduler, processors, sink, agent).
# The command picks the service: `gridledger api`, `gridledger agent ...`, etc.
# BASE: any image with Python 3.11 and pip on PATH (tests/e2e/test_compose_up.py builds
# one from Debian packages when no registry is reachable: deploy/local/pybase.Dockerfile).
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 GRIDLEDGER_HOME=/var/lib/gridledger
WORKDIR /app
# .dockerignore admits only what the COPY lines below take (tests/infra/test_build_context.py).
COPY pyproject.toml README.md ./
# The client distribution, which the server depends on (and which holds the Avro schemas).
COPY client ./client
COPY schemas ./schemas
COPY projections ./projections
COPY services ./services
COPY infra ./infra
COPY bench ./bench
# The folders exist in the image owned by the service user, so the named volumes mounted
# on them start out writable by it (Docker copies a new volume's ownership from the image).
RUN pip install ./client . && useradd --system --home /var/lib/gridledger gridledger \
    && mkdir -p /var/lib/gridledger /etc/gridledger \
    && chown gridledger /var/lib/gridledger /etc/gridledger
USER gridledger
ENTRYPOINT ["gridledger"]
