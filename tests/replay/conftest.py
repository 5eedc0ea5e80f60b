"""The replay tests share the sink tests' private-schema fixture."""

from tests.sink.conftest import pg  # noqa: F401 - re-exported fixture
