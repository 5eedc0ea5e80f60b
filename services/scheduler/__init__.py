"""The scheduler: fleet view, pre-flight fit, best-fit placement, queue deadlines."""

from services.scheduler.service import Scheduler, build_scheduler

__all__ = ["Scheduler", "build_scheduler"]
