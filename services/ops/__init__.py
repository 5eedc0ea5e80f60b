"""Operating the services: health, readiness, metrics, structured logs and the supervisor.

- :mod:`.checks` — dependency checks (Postgres, Docker, consumer membership and
  lag; the broker's is :mod:`services.ledger.health`), each answering ok or not
  with a detail a person can act on.
- :mod:`.server` — the small ops HTTP server every service runs on its own port:
  ``/healthz`` (the process is alive), ``/readyz`` (its checks, 200 or 503),
  ``/metrics`` (Prometheus text).
- :mod:`.metrics` — every gridledger metric, defined once.
- :mod:`.logs` — the one logging setup (text or JSON lines with job, attempt, event).
- :mod:`.specs` — what a service process is given (arguments, environment, ops port)
  and free ports.
- :mod:`.fleet`, :mod:`.supervisor` — run a set of services from a fleet file,
  restart what crashes, stop everything that was started.
- :mod:`.health` — every service's readiness as rows (``gridledger health`` and
  ``gridledger run`` print them as a table: ``services.cli.fleet``).

Each service builds its own ops endpoints (``services/<service>/endpoints.py``) from
these checks; nothing here knows the services.
"""
