"""An example subscriber service: tells who must act on each job that ended, and what it cost.

It reads ``job-events`` (the decisions) and ``accounting`` (the records) with
``gridledger_client.Subscriber`` and prints one line per fact. It needs only the
client (``pip install ./client``), none of the server:

    job-1f0c2a9e4b7d failed · missing_module · user: Install 'transformers' in the image ...
    job-1f0c2a9e4b7d final: 1.4 GPU-s billable, 0.0 credited (policy 1)

Run it against the local stack (the broker and the topic prefix come from
``GRIDLEDGER_KAFKA_BOOTSTRAP`` and ``GRIDLEDGER_TOPIC_PREFIX``, as for every
service; the defaults are the local stack's):

    python examples/subscriber.py                 # new facts only, until Ctrl-C
    python examples/subscriber.py --from-beginning --group notifier
    python examples/subscriber.py --from-beginning --idle-exit 5

With ``--group`` several copies share the partitions and a restart resumes
where the group left off (the offsets are committed after each printed line).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from gridledger_client import Delivery, Subscriber

ENDINGS = ("FailureClassified", "JobSucceeded", "JobCancelled", "JobRejected", "AccountingRecord")


def line(delivery: Delivery) -> str | None:
    """The line to print for a record, or None when it needs none."""
    v, kind = delivery.value, delivery.type
    if kind == "FailureClassified":
        return (
            f"{v['job_id']} attempt {v['attempt']} {v['failure_class']} · {v['attribution']}"
            f"{' · retried' if v['retryable'] else ''}: {v['advice']}"
        )
    if kind == "JobRejected":
        return f"{v['job_id']} rejected · {v['failure_class']}: {v['advice']}"
    if kind in ("JobSucceeded", "JobCancelled"):
        return f"{v['job_id']} {kind.removeprefix('Job').lower()}"
    if kind == "AccountingRecord" and v["final"]:
        return (
            f"{v['job_id']} final: {v['billable_gpu_seconds']:.1f} GPU-s billable, "
            f"{v['credited_gpu_seconds']:.1f} credited (policy {v['policy_version']})"
        )
    return None


async def main(argv: list[str]) -> int:
    """Follow the job events and accounting records and print what each ending asks for."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-beginning", action="store_true", help="read the whole history")
    parser.add_argument("--group", help="consumer group: share partitions, resume after restart")
    parser.add_argument("--idle-exit", type=float, help="stop after this many quiet seconds")
    args = parser.parse_args(argv)
    subscriber = Subscriber(
        os.environ.get("GRIDLEDGER_KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
        ["job-events", "accounting"],
        prefix=os.environ.get("GRIDLEDGER_TOPIC_PREFIX", "gridledger."),
        group_id=args.group,
        from_beginning=args.from_beginning,
        types=ENDINGS,
    )
    async with subscriber as sub:
        async for delivery in sub.deliveries(idle_timeout_s=args.idle_exit):
            text = line(delivery)
            if text:
                print(text, flush=True)
            if args.group:
                await sub.commit()
    print(f"({sub.duplicates} repeated records dropped)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main(sys.argv[1:])))
    except KeyboardInterrupt:
        sys.exit(130)
