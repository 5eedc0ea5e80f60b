"""Where a webhook may go (services/webhooks/targets.py) and how one request is sent: the
URL and address rules against an attacker's choices, and real requests to a local receiver
(redirects not followed, a hanging receiver timed out, a refused address never reached)."""

from __future__ import annotations

import ipaddress

import pytest
from standardwebhooks import Webhook

from services.settings import Settings
from services.webhooks import service, targets
from services.webhooks.store import new_secret
from tests.webhooks.receiver import Receiver


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("ftp://example.com/hook", "scheme 'ftp'"),
        ("file:///etc/passwd", "scheme 'file'"),
        ("https://user:pw@example.com/hook", "credentials"),
        ("https://:pw@example.com/hook", "credentials"),
        ("https:///hook", "no host"),
        ("https://example.com/" + "a" * 2048, "1 to 2048"),
        ("", "1 to 2048"),
        ("https://exa mple.com/\n", "non-printable"),
        ("https://bücher.example/hook", "non-ASCII"),
    ],
)
def test_the_url_rule_refuses_what_is_no_plain_http_url(url: str, fragment: str) -> None:
    problem = targets.url_problem(url)
    assert problem is not None and fragment in problem


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.1.2.3",
        "::1",
        "::ffff:127.0.0.1",
        "64:ff9b::7f00:1",
        "169.254.169.254",
        "10.0.0.5",
        "172.16.0.1",
        "192.168.1.1",
        "100.64.0.1",
        "0.0.0.0",
        "::",
        "fc00::1",
        "fe80::1",
        "::ffff:169.254.169.254",
        "224.0.0.1",
        "255.255.255.255",
    ],
)
def test_internal_addresses_are_refused(address: str) -> None:
    assert targets.address_problem(ipaddress.ip_address(address), allow_loopback=False)


def test_loopback_only_is_what_the_operator_setting_allows() -> None:
    for allowed in ("127.0.0.1", "::1", "::ffff:127.0.0.1"):
        assert targets.address_problem(ipaddress.ip_address(allowed), allow_loopback=True) is None
    for still in ("169.254.169.254", "10.0.0.5", "192.168.1.1", "fe80::1"):
        assert targets.address_problem(ipaddress.ip_address(still), allow_loopback=True)
    for public in ("93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"):
        assert targets.address_problem(ipaddress.ip_address(public), allow_loopback=False) is None


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8600/v1/jobs",
        "http://[::1]:55432/",
        "http://localhost:9092/",
        "http://2130706433/",  # 127.0.0.1 as one number
        "http://0x7f.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:a9fe:a9fe]/",
    ],
)
async def test_a_subscription_to_an_internal_address_is_refused(url: str) -> None:
    problem = await targets.target_problem(url, allow_loopback=False)
    assert problem is not None and ("loopback" in problem or "not a public" in problem), problem


async def test_a_refused_address_is_never_connected_to_at_delivery() -> None:
    receiver = await Receiver().start()
    strict = Settings(webhooks_allow_loopback=False)
    try:
        async with service.client(strict) as http:
            for url in (receiver.url(), f"http://localhost:{receiver.port}/hook"):
                attempt = await service.post(http, strict, url, "ev-1", "{}", [new_secret()])
                assert not attempt.ok and "loopback" in attempt.error, attempt
        assert receiver.received == []
    finally:
        await receiver.stop()


async def test_one_request_signed_redirects_not_followed_hangs_timed_out() -> None:
    receiver = await Receiver().start()
    local = Settings(webhooks_allow_loopback=True, webhooks_timeout_s=0.5)
    old, new = new_secret(), new_secret()
    try:
        async with service.client(local) as http:
            sent = await service.post(http, local, receiver.url(), "ev-1", '{"a":1}', [new, old])
            assert sent.ok and sent.status_code == 200
            got = receiver.bodies()[0]
            for secret in (old, new):  # during a rotation both verify
                assert Webhook(secret).verify(got.body, got.headers) == {"a": 1}
            assert got.headers["webhook-id"] == "ev-1"

            moved = await service.post(http, local, receiver.url("/redirect"), "ev-2", "{}", [new])
            assert not moved.ok and moved.status_code == 302 and "not followed" in moved.error
            assert receiver.bodies("/elsewhere") == []

            receiver.hanging = {"/hook"}
            hung = await service.post(http, local, receiver.url(), "ev-3", "{}", [new])
            assert not hung.ok and hung.status_code is None and "no answer within" in hung.error
    finally:
        await receiver.stop()
