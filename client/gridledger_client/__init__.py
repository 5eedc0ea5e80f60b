"""gridledger's client: subscribe to its topics, call its API, verify what it sends.

>>> from gridledger_client import Subscriber
>>> async with Subscriber("127.0.0.1:9092", ["job-events"], group_id="billing") as sub:
...     async for delivery in sub:
...         handle(delivery.type, delivery.value)   # "JobFailed", {"job_id": ..., ...}
...         await sub.commit()                      # with a group: resume here after a restart

- :mod:`gridledger_client.wire`: the Avro single-object framing and the stored schemas
  (``avro/*.avsc``, the one copy, which the server reads too); records decode to dicts.
- :mod:`gridledger_client.subscriber`: :class:`Subscriber`, decoded, schema-resolved and
  de-duplicated records from the topics.
- :mod:`gridledger_client.http`: :class:`Client`, the API's typed HTTP client.
- :mod:`gridledger_client.cloudevents`: the CloudEvents attributes of a record's headers.
- :mod:`gridledger_client.webhooks`: Standard Webhooks signature verification.

Its dependencies are aiokafka and fastavro only; names are imported on first
use, so ``import gridledger_client.wire`` loads no Kafka client.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Subscriber": "subscriber",
    "Delivery": "subscriber",
    "Undecodable": "subscriber",
    "SeenIds": "subscriber",
    "TOPICS": "subscriber",
    "Client": "http",
    "ApiError": "http",
    "CloudEvent": "cloudevents",
    "verify_webhook": "webhooks",
    "WebhookVerificationError": "webhooks",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'gridledger_client' has no attribute {name!r}")
    return getattr(importlib.import_module(f"gridledger_client.{module}"), name)
