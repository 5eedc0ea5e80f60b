"""The CloudEvents attributes of gridledger's event records (Kafka protocol binding).

Every event record carries them in binary content mode (:meth:`CloudEvent.from_headers`);
a webhook delivery's body is the same event in structured mode, JSON with ``data``
(:meth:`CloudEvent.from_json`, after :func:`gridledger_client.webhooks.verify_webhook`).
The attributes: ``ce_specversion`` (1.0), ``ce_id`` (the event id), ``ce_source``
(``/gridledger/<producer>``), ``ce_type`` (``gridledger.<Record>``), ``ce_time`` (when it
happened, RFC 3339), ``ce_subject`` (the job id, or the node id of a node event) and
``content-type`` (the Avro single-object encoding of the value). Views on the compacted
topics are no events and carry none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gridledger_client import wire

REQUIRED = ("specversion", "id", "source", "type")


class NotACloudEventError(ValueError):
    """The headers lack a required attribute or hold one that breaks its rule (named)."""


@dataclass(frozen=True)
class CloudEvent:
    """An event's context attributes, and its data in structured mode (in binary mode the
    data is the record's value: decode it with :func:`gridledger_client.wire.decode`)."""

    specversion: str
    id: str
    source: str
    type: str
    time: datetime | None = None
    subject: str | None = None
    datacontenttype: str | None = None
    data: Any = None

    @property
    def record_type(self) -> str:
        """The Avro record's short name: ``JobFailed`` for ``gridledger.JobFailed``."""
        return self.type.removeprefix(wire.CE_TYPE_PREFIX)

    @classmethod
    def from_headers(cls, headers: Iterable[tuple[str, bytes | None]]) -> CloudEvent:
        """The attributes of a Kafka record's headers (``record.headers`` of aiokafka).

        Raises :class:`NotACloudEventError` naming the missing or malformed attribute.
        """
        attrs: dict[str, str] = {}
        content_type = None
        for name, value in headers:
            try:
                text = (value or b"").decode("utf-8")
            except UnicodeDecodeError as exc:
                raise NotACloudEventError(f"header {name[:40]!r} is not UTF-8: {exc}") from exc
            if name.startswith("ce_"):
                attrs[name[3:]] = text
            elif name.lower() == wire.HEADER_CONTENT_TYPE:
                content_type = text
        return cls._checked(attrs, "ce_", content_type, None)

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> CloudEvent:
        """The event of a structured-mode JSON object (a webhook delivery's parsed body).

        Raises :class:`NotACloudEventError` naming the missing or malformed attribute.
        """
        attrs = {k: v for k, v in document.items() if isinstance(v, str) and k != "data"}
        return cls._checked(attrs, "", attrs.get("datacontenttype"), document.get("data"))

    @classmethod
    def _checked(
        cls, attrs: dict[str, str], prefix: str, content_type: str | None, data: Any
    ) -> CloudEvent:
        """The attributes as a CloudEvent, each required one present and each rule kept;
        ``prefix`` names them as the carrier does (``ce_`` for Kafka headers)."""
        missing = [f"{prefix}{a}" for a in REQUIRED if not attrs.get(a)]
        if missing:
            raise NotACloudEventError(f"missing {', '.join(missing)} (required by CloudEvents)")
        if attrs["specversion"] != wire.CE_SPECVERSION.decode():
            raise NotACloudEventError(
                f"{prefix}specversion {attrs['specversion'][:20]!r} is not "
                f"{wire.CE_SPECVERSION.decode()}, the version this client reads"
            )
        time = None
        if attrs.get("time"):
            try:
                time = datetime.fromisoformat(attrs["time"])
            except ValueError as exc:
                raise NotACloudEventError(
                    f"{prefix}time {attrs['time'][:40]!r} is not RFC 3339"
                ) from exc
            if time.tzinfo is None:
                raise NotACloudEventError(f"{prefix}time {attrs['time']!r} has no UTC offset")
        return cls(
            specversion=attrs["specversion"],
            id=attrs["id"],
            source=attrs["source"],
            type=attrs["type"],
            time=time,
            subject=attrs.get("subject") or None,
            datacontenttype=content_type,
            data=data,
        )
