# Base for the services image when no registry is reachable: the locally built
# gridledger/python (Debian bookworm + python3, `gridledger dev up`) with a venv on PATH,
# standing in for python:3.11-slim-bookworm (`--build-arg BASE=...` of ./Dockerfile).
# ca-certificates.crt: the building machine's trust store (pip reaches PyPI through it).
FROM gridledger/python:latest
COPY ca-certificates.crt /etc/ssl/certs/build-host-ca.crt
ENV PIP_CERT=/etc/ssl/certs/build-host-ca.crt
RUN apt-get update -q && apt-get install -y -q --no-install-recommends python3-venv \
    && rm -rf /var/lib/apt/lists/* && python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
