"""Stream processors: dispatch, state, watchdog, classifier + retry decider, accounting."""

from services.processors.app import PROCESSORS, Processors, build_processors

__all__ = ["PROCESSORS", "Processors", "build_processors"]
