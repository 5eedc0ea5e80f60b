"""The CLI's exit codes: one table, used by the commands, ``--help`` and the README.

A script can tell apart "the job failed" (look at the job) from "the job does
not exist" (wrong id or wrong profile), "the API is down" (retry later), "the
spec is invalid" (fix the file) and "the command line is wrong" (read --help).
"""

from __future__ import annotations

from enum import IntEnum

from schemas.errors import GridledgerError


class Exit(IntEnum):
    """The CLI's exit codes, one per kind of outcome, so scripts can tell a failed job from a usage
    error."""

    OK = 0
    JOB_FAILED = 1
    USAGE = 2
    INVALID_SPEC = 3
    NOT_FOUND = 4
    API_UNREACHABLE = 5
    NOT_AUTHORISED = 6
    CONFLICT = 7
    ERROR = 8
    TIMED_OUT = 9
    INTERRUPTED = 130


MEANINGS: dict[Exit, str] = {
    Exit.OK: "success (for `submit --wait`, `status JOB --watch`: the job succeeded)",
    Exit.JOB_FAILED: "the job ended without success (failed, rejected, cancelled, "
    "succeeded_with_errors), or a check found a problem (`replay --verify`, `replay --file`, "
    "`dev status`, `health`)",
    Exit.USAGE: "the command line is wrong: unknown option, missing argument, missing file",
    Exit.INVALID_SPEC: "the job spec (or a price catalog) was refused; each field, problem and "
    "fix is printed",
    Exit.NOT_FOUND: "no such job (for this token), or no such attempt of it",
    Exit.API_UNREACHABLE: "the API could not be reached or is unavailable (HTTP 502/503/504): "
    "retry later",
    Exit.NOT_AUTHORISED: "no token, or the API refused it: `gridledger login`",
    Exit.CONFLICT: "the job's state does not allow it (e.g. cancel of a job that already ended)",
    Exit.ERROR: "any other error the message explains (API error, local stack error, config)",
    Exit.TIMED_OUT: "a wait's `--timeout` passed before the job ended; the job goes on",
    Exit.INTERRUPTED: "interrupted (Ctrl-C)",
}
"""What each code means, in the words of ``gridledger --help`` and the README."""


class CliError(GridledgerError):
    """An error with the exit code it maps to; the message says what to do."""

    exit_code: Exit = Exit.ERROR

    def __init__(self, message: str, exit_code: Exit | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


def for_http_status(status: int) -> Exit:
    """The exit code of an API error answer."""
    if status == 404:
        return Exit.NOT_FOUND
    if status in (401, 403):
        return Exit.NOT_AUTHORISED
    if status == 409:
        return Exit.CONFLICT
    if status in (400, 413, 422):
        return Exit.USAGE
    if status in (502, 503, 504):
        return Exit.API_UNREACHABLE
    return Exit.ERROR


def exit_code_of(exc: GridledgerError) -> Exit:
    """The exit code an error asks for (its ``exit_code``), else the generic error code."""
    code = getattr(exc, "exit_code", None)
    return Exit(code) if code is not None else Exit.ERROR


def help_epilog() -> str:
    r"""The table for ``gridledger --help`` (click keeps lines starting with \b as they are)."""
    lines = ["\b", "Exit codes:"]
    lines += [f"  {int(code):>3}  {meaning}" for code, meaning in MEANINGS.items()]
    return "\n".join(lines)
