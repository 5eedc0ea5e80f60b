"""Verify a webhook delivery's Standard Webhooks signature (standard library only).

A delivery carries three headers: ``webhook-id`` (the event's stable id: a redelivery
carries the same one, so a receiver drops repeats by it), ``webhook-timestamp`` (Unix
seconds when it was signed) and ``webhook-signature`` (space-separated ``v1,<base64>``
HMAC-SHA256 signatures of ``{id}.{timestamp}.{body}``, one per current secret while a
secret rotates). A secret is ``whsec_`` followed by the key in base64.

>>> verify_webhook("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", request.headers, await request.read())

Verify the body's bytes as received, before parsing them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import time
from collections.abc import Mapping, Sequence

SECRET_PREFIX = "whsec_"
TOLERANCE_S = 300
"""How far a timestamp may lie from the receiver's clock, either way (the standard's 5 min)."""


class WebhookVerificationError(ValueError):
    """The delivery is not proven to come from the sender; the message names the header and
    the rule it broke."""


def _key(secret: str | bytes) -> bytes:
    if isinstance(secret, bytes):
        key = secret
    else:
        try:
            # Unpadded base64 is common in secrets copied by hand.
            key = base64.b64decode(secret.removeprefix(SECRET_PREFIX) + "==", validate=False)
        except (binascii.Error, ValueError) as exc:
            raise WebhookVerificationError(
                f"the secret is not {SECRET_PREFIX}<base64>: {exc}"
            ) from exc
    if not key:
        raise WebhookVerificationError("the secret is empty")
    return key


def sign(secret: str | bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``v1,<base64>`` signature of one delivery (what a sender puts in
    ``webhook-signature``)."""
    mac = hmac.new(_key(secret), f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


def _digest(signature: str) -> bytes:
    """The MAC bytes of a ``v1,<base64>`` signature (empty when they are not base64)."""
    try:
        return base64.b64decode(signature[3:], validate=True)
    except (binascii.Error, ValueError):
        return b""


def verify_webhook(
    secret: str | bytes | Sequence[str | bytes],
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance_s: float = TOLERANCE_S,
    now: float | None = None,
) -> str:
    """Check a delivery's signature and timestamp; return its ``webhook-id``.

    ``secret``: the subscription's secret, or several while it rotates (any one matching
    is enough). ``headers``: the request's, in any letter case. ``now``: the receiver's
    clock in Unix seconds (default: ``time.time()``). Raises
    :class:`WebhookVerificationError` naming what failed.
    """
    secrets = [secret] if isinstance(secret, str | bytes) else list(secret)
    if not secrets:
        raise WebhookVerificationError("no secret given to verify with")
    lower = {k.lower(): v for k, v in headers.items()}
    missing = [
        h for h in ("webhook-id", "webhook-timestamp", "webhook-signature") if not lower.get(h)
    ]
    if missing:
        raise WebhookVerificationError(f"missing header {', '.join(missing)}")
    msg_id, stamp, signatures = (
        lower["webhook-id"], lower["webhook-timestamp"], lower["webhook-signature"]
    )  # fmt: skip
    if not stamp.isdigit() or len(stamp) > 12:
        raise WebhookVerificationError(
            f"webhook-timestamp {stamp[:40]!r} is not Unix seconds (digits only)"
        )
    timestamp = int(stamp)
    clock = time.time() if now is None else now
    if abs(clock - timestamp) > tolerance_s:
        raise WebhookVerificationError(
            f"webhook-timestamp {timestamp} is {clock - timestamp:+.0f} s from this clock, "
            f"beyond the tolerance of {tolerance_s:.0f} s (a replay, or a clock to fix)"
        )
    expected = [_digest(sign(s, msg_id, timestamp, body)) for s in secrets]
    offered = [_digest(s) for s in signatures.split() if s.startswith("v1,")]
    if not offered:
        raise WebhookVerificationError("webhook-signature holds no v1 signature")
    for candidate in offered:
        if candidate and any(hmac.compare_digest(candidate, e) for e in expected):
            return msg_id
    raise WebhookVerificationError(
        "webhook-signature matches no secret: the body, id or timestamp was altered, or "
        "the secret is wrong"
    )
