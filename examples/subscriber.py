"""An example subscriber service: tells who must act on each job that ended, and what it cost.

It reads ``job-events`` (the decisions) and ``accounting`` (the records) with
``services.client.Subscriber`` and prints one line per fact:

    job-1f0c2a9e4b7d failed · missing_module · user: Install 'transformers' in the image ...
    job-1f0c2a9e4b7d final: 1.4 GPU-s billable, 0.0 credited (policy 1)

Run it against the local stack (it finds the broker and the topic prefix the
same way every service does, from ``GRIDLEDGER_HOME``):

    python examples/subscriber.py                 # new facts only, until Ctrl-C
    python examples/subscriber.py --from-beginning --group notifier
    python examples/subscriber.py --from-beginning --idle-exit 5

With ``--group`` several copies share the partitions and a restart resumes
where the group left off (the offsets are committed after each printed line).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from schemas.events import FailureClassified, JobCancelled, JobRejected, JobSucceeded
from schemas.views import AccountingRecord
from services.client import Delivery, Subscriber
from services.settings import load_settings

ENDINGS = ("FailureClassified", "JobSucceeded", "JobCancelled", "JobRejected", "AccountingRecord")


def line(delivery: Delivery) -> str | None:
    """The line to print for a record, or None when it needs none."""
    value = delivery.value
    if isinstance(value, FailureClassified):
        return (
            f"{value.job_id} attempt {value.attempt} {value.failure_class} · {value.attribution}"
            f"{' · retried' if value.retryable else ''}: {value.advice}"
        )
    if isinstance(value, JobRejected):
        return f"{value.job_id} rejected · {value.failure_class}: {value.advice}"
    if isinstance(value, JobSucceeded):
        return f"{value.job_id} succeeded"
    if isinstance(value, JobCancelled):
        return f"{value.job_id} cancelled"
    if isinstance(value, AccountingRecord) and value.final:
        return (
            f"{value.job_id} final: {value.billable_gpu_seconds:.1f} GPU-s billable, "
            f"{value.credited_gpu_seconds:.1f} credited (policy {value.policy_version})"
        )
    return None


async def main(argv: list[str]) -> int:
    """Follow the job events and accounting records and print what each ending asks for."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from-beginning", action="store_true", help="read the whole history")
    parser.add_argument("--group", help="consumer group: share partitions, resume after restart")
    parser.add_argument("--idle-exit", type=float, help="stop after this many quiet seconds")
    args = parser.parse_args(argv)
    settings = load_settings()
    subscriber = Subscriber.from_settings(
        settings,
        ["job-events", "accounting"],
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
