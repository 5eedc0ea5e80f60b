"""The client's Standard Webhooks verification against signatures the ``standardwebhooks``
package makes (what the delivery service signs with), and the body's CloudEvent."""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime

import pytest
from gridledger_client.cloudevents import CloudEvent, NotACloudEventError
from gridledger_client.webhooks import WebhookVerificationError, sign, verify_webhook
from standardwebhooks import Webhook

from schemas import codec
from schemas.events import JobFailed
from tests.schemas.samples import sample

SECRET = "whsec_" + base64.b64encode(b"a" * 24).decode()
ROTATED = "whsec_" + base64.b64encode(b"b" * 32).decode()
NOW = 1_800_000_000
BODY = json.dumps(codec.cloudevent(sample(JobFailed)), sort_keys=True)


def delivery(*secrets: str, msg_id: str = "evt-1", at: int = NOW) -> dict[str, str]:
    """The headers the delivery service sends, signed by the standardwebhooks package."""
    when = datetime.fromtimestamp(at, UTC)
    return {
        "Webhook-Id": msg_id,
        "Webhook-Timestamp": str(at),
        "Webhook-Signature": " ".join(Webhook(s).sign(msg_id, when, BODY) for s in secrets),
    }


def test_a_delivery_signed_by_standardwebhooks_verifies_and_gives_its_id() -> None:
    assert verify_webhook(SECRET, delivery(SECRET), BODY.encode(), now=NOW + 299) == "evt-1"
    ours = sign(SECRET, "evt-1", NOW, BODY.encode())
    assert ours == delivery(SECRET)["Webhook-Signature"], "the same bytes as the package's"
    now = int(time.time())  # the package verifies against its own clock
    headers = {"webhook-id": "evt-1", "webhook-timestamp": str(now),
               "webhook-signature": sign(SECRET, "evt-1", now, BODY.encode())}  # fmt: skip
    assert Webhook(SECRET).verify(BODY, headers) == json.loads(BODY), "ours verify there too"
    event = CloudEvent.from_json(json.loads(BODY))
    assert event.record_type == "JobFailed" and event.subject == sample(JobFailed).job_id
    assert event.data["failure_class"] == sample(JobFailed).failure_class


@pytest.mark.parametrize(
    ("change", "rule"),
    [
        (lambda h, b: (h | {"Webhook-Id": "evt-2"}, b), "matches no secret"),
        (lambda h, b: (h, b.replace(b"JobFailed", b"JobSucceed")), "matches no secret"),
        (lambda h, b: (h | {"Webhook-Timestamp": str(NOW + 1)}, b), "matches no secret"),
        (lambda h, b: (h | {"Webhook-Signature": "v1,AAAA"}, b), "matches no secret"),
        (lambda h, b: (h | {"Webhook-Signature": "v2,abc"}, b), "no v1 signature"),
        (lambda h, b: ({k: v for k, v in h.items() if k != "Webhook-Id"}, b), "webhook-id"),
        (lambda h, b: (h | {"Webhook-Timestamp": "1e9"}, b), "not Unix seconds"),
        (lambda h, b: (h | {"Webhook-Timestamp": str(NOW - 301)}, b), "tolerance of 300 s"),
    ],
)
def test_an_altered_replayed_or_malformed_delivery_is_refused_naming_the_rule(
    change: object, rule: str
) -> None:
    headers, body = change(delivery(SECRET), BODY.encode())  # type: ignore[operator]
    with pytest.raises(WebhookVerificationError, match=rule):
        verify_webhook(SECRET, headers, body, now=NOW)


def test_while_a_secret_rotates_either_one_verifies_and_a_wrong_one_does_not() -> None:
    both = delivery(ROTATED, SECRET)  # the previous secret still signs for a while
    assert verify_webhook(ROTATED, both, BODY.encode(), now=NOW) == "evt-1"
    assert verify_webhook([SECRET], both, BODY.encode(), now=NOW) == "evt-1"
    with pytest.raises(WebhookVerificationError, match="matches no secret"):
        verify_webhook("whsec_" + base64.b64encode(b"c" * 24).decode(), both, BODY.encode(),
                       now=NOW)  # fmt: skip


def test_a_body_that_is_no_cloudevent_is_refused_naming_the_attribute() -> None:
    document = json.loads(BODY)
    with pytest.raises(NotACloudEventError, match="missing source"):
        CloudEvent.from_json({k: v for k, v in document.items() if k != "source"})
    with pytest.raises(NotACloudEventError, match="specversion '0.3'"):
        CloudEvent.from_json(document | {"specversion": "0.3"})
    with pytest.raises(NotACloudEventError, match="time"):
        CloudEvent.from_json(document | {"time": "yesterday"})
    with pytest.raises(NotACloudEventError, match="not UTF-8"):
        CloudEvent.from_headers([("ce_id", b"\xff")])
