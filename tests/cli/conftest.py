"""The CLI tests drive a real API (own topics and schema, sink in-process) over HTTP."""

from tests.api.conftest import api  # noqa: F401 - re-exported fixture
