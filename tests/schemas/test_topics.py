"""The topic table is the one list: every event names a topic of it, the subscriber
distribution's list and the README's table agree with it, and the derived lists keep
their rules."""

from __future__ import annotations

import re
from pathlib import Path

from gridledger_client.subscriber import TOPICS as CLIENT_TOPICS

from schemas import topics
from schemas.events import EVENT_TYPES


def test_every_event_is_appended_to_a_history_topic_of_the_table() -> None:
    named = {cls.TOPIC for cls in EVENT_TYPES.values()}
    assert named <= set(topics.TOPIC_NAMES)
    kinds = {topics.BY_SUFFIX[t].kind for t in named}
    assert kinds <= {"history", "internal"}, kinds


def test_the_subscriber_distribution_lists_exactly_the_subscribable_topics() -> None:
    # client/ installs alone and cannot import the table; this holds the two together.
    assert CLIENT_TOPICS == topics.SUBSCRIBABLE_TOPICS


def test_suffixes_are_unique_and_the_derived_lists_follow_the_rows() -> None:
    assert len(topics.TOPIC_NAMES) == len(topics.TOPICS)
    assert {"job-state", "accounting", "scheduler-state"} == topics.COMPACTED_TOPICS
    assert topics.SEALED_TOPICS == ("job-events", "log-chunks", "meter-ticks")
    assert topics.FOLDED_TOPICS == ("job-events", "meter-ticks")
    # A compacted view keeps only the latest record: nothing that must be kept whole is one.
    whole = set(topics.SEALED_TOPICS) | topics.KEPT_FOREVER | set(topics.FOLDED_TOPICS)
    assert not whole & topics.COMPACTED_TOPICS
    # The dead letters, seals and prices are read whole in arrival order, and the
    # schedulers' lease is a group's one partition, their snapshot is read whole: one
    # partition each.
    assert {
        "dead-letter",
        "ledger-seals",
        "prices",
        "scheduler-lease",
        "scheduler-state",
    } == topics.SINGLE_PARTITION


def test_the_readme_lists_the_topics_of_the_table_with_their_keys() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    contracts = readme.split("## Contracts for other services", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `gridledger\.([a-z-]+)` \| ([^|]+) \|", contracts, flags=re.M)
    assert sorted(suffix for suffix, _ in rows) == sorted(topics.TOPIC_NAMES)
    for suffix, key in rows:
        if key.strip() in ("job id", "node id"):
            assert topics.BY_SUFFIX[suffix].key == key.split()[0], suffix
