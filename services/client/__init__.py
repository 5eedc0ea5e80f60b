"""A client for services that subscribe to gridledger's topics.

>>> async with Subscriber("127.0.0.1:9092", ["job-events"], group_id="billing") as sub:
...     async for delivery in sub:
...         handle(delivery.value)          # a JobFailed, a JobView, ...
...         await sub.commit()               # with a group: resume here after a restart

Everything a subscriber would otherwise reimplement is done once, here, with the
project's own codec (``schemas.codec``): the Avro single-object framing, the
lookup of the writer schema by its fingerprint among every stored version, the
resolution to the current model, and de-duplication by ``event_id`` (the ledger
is at-least-once; derived events have deterministic ids, so a subscriber that
drops repeated ids sees each fact once). See ``docs/wire-format.md`` for the
bytes, for consumers in other languages.
"""

from services.client.subscriber import Delivery, SeenIds, Subscriber, Undecodable

__all__ = ["Delivery", "SeenIds", "Subscriber", "Undecodable"]
