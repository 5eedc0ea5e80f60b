# The object store from the `weed` binary `dev up` built (copied into the build context).
FROM gridledger/python:latest
RUN apt-get update -q && apt-get install -y -q --no-install-recommends curl \
    && rm -rf /var/lib/apt/lists/*
COPY weed /usr/local/bin/weed
ENTRYPOINT ["/usr/local/bin/weed"]
