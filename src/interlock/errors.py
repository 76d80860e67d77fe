"""The error hierarchy. Each error carries the exit code the CLI uses for it.

Messages name the place (file, pipeline, phase, worker, key) and the fix; the CLI prints the
message and never a traceback unless `--debug` is given.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes, stable across releases so scripts can rely on them."""

    OK = 0  # delivered, or the command did what was asked
    RUN_FAILED = 1  # the run ended failed (or cancelled)
    BAD_INPUT = 2  # invalid workflow, unknown run, wrong state for the command
    PAUSED = 3  # the run is waiting for a person's approval
    BUSY = 4  # another orchestrator holds the run's lease
    STORAGE = 5  # the state directory or database cannot be used
    NOT_VERIFIED = 6  # a run's history or a bundle fails verification (tampered or damaged)
    OVER_BUDGET = 7  # with --strict: the worst case of a run is over its pipeline's budget
    BAD_SIGNATURE = 8  # a bundle's signature does not match the public key given (or is absent)
    CALL_NOT_WAITING = 9  # a decision for a tool call that no longer waits (decided, unknown)
    MISSING_EXTRA = 69  # an optional dependency the command needs is not installed (sysexits)
    INTERNAL = 70  # a bug in interlock itself (EX_SOFTWARE); nothing recorded is lost
    INTERRUPTED = 130  # Ctrl-C or SIGTERM; the run stays resumable
    PIPE_CLOSED = 141  # the reader of stdout went away (`| head`), as git's 128 + SIGPIPE


class InterlockError(Exception):
    """Base class: a problem a person can act on."""

    exit_code: ExitCode = ExitCode.BAD_INPUT

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class WorkflowError(InterlockError):
    """A workflow file is invalid. `problems` holds one line per problem found."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{source}: invalid workflow ({len(problems)} problem(s))\n{lines}")


class UsageError(InterlockError):
    """A command was given something it cannot use (unknown run, wrong state, bad flag)."""


class MissingExtra(InterlockError):
    """A command needs an optional dependency (an extra) that is not installed."""

    exit_code = ExitCode.MISSING_EXTRA


class InvalidSignal(UsageError):
    """A signal's data does not match the schema of the wait that names it."""


class RunNotFound(UsageError):
    """No run matches the given id or prefix."""


class PipelineNotFound(RunNotFound):
    """No workflow file given to a server names the pipeline (the API's `pipeline_not_found`)."""


class RunExists(UsageError):
    """A new run was given the id of a run the ledger already holds."""


class RunInert(UsageError):
    """The run was imported from a bundle and nobody has trusted its definition yet."""


class CallNotWaiting(UsageError):
    """A tool call was approved or rejected that does not wait for a decision (decided
    already, never asked, or its run ended)."""

    exit_code = ExitCode.CALL_NOT_WAITING


class LeaseHeld(InterlockError):
    """Another orchestrator is driving the run."""

    exit_code = ExitCode.BUSY


class LeaseLost(InterlockError):
    """This orchestrator's lease expired or was taken over; it must stop writing."""

    exit_code = ExitCode.BUSY


class StorageError(InterlockError):
    """The ledger cannot be opened, read or written."""

    exit_code = ExitCode.STORAGE


class StorageUnavailable(StorageError):
    """The ledger's database did not answer (down, restarting, unreachable) after retries: the
    caller may wait and try again, nothing was written."""


class DamagedHistory(StorageError):
    """One run's recorded history cannot be read (an event the code cannot decode or fold):
    commands about that run say which event and what to do; other runs are not affected."""

    def __init__(self, run_id: str, seq: int | None, message: str) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.seq = seq


class RunFolderTaken(StorageError):
    """A new run's folder already holds files of a run this ledger does not know (another
    store using the same state directory, or a ledger that was replaced): nothing is
    recorded, and those files are left as they are."""


class DiskFull(StorageError):
    """The disk (or file system) holding the ledger or the run directories has no space left."""


class VerificationFailed(InterlockError):
    """A run's history or an exported bundle does not match its hashes."""

    exit_code = ExitCode.NOT_VERIFIED


class BadSignature(VerificationFailed):
    """A bundle's signature does not match the public key it is checked against."""

    exit_code = ExitCode.BAD_SIGNATURE
