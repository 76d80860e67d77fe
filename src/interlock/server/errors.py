"""API errors: one JSON shape, `{"error": {"code", "message"}}`, with the CLI's messages."""

from __future__ import annotations

from typing import Any

from interlock.errors import (
    CallNotWaiting,
    DamagedHistory,
    InterlockError,
    InvalidSignal,
    LeaseHeld,
    LeaseLost,
    PipelineNotFound,
    RunFolderTaken,
    RunInert,
    RunNotFound,
    StorageError,
    WorkflowError,
)


class ApiError(Exception):
    """An error answered with `status` and a stable machine-readable `code`."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = headers or {}


def body(code: str, message: str) -> dict[str, Any]:
    """The JSON body of an error."""
    return {"error": {"code": code, "message": message}}


def from_interlock(exc: InterlockError) -> ApiError:
    """The HTTP form of an error the CLI would print (same message)."""
    from interlock.storage.batches import BatchExists, BatchNotFound

    if isinstance(exc, BatchNotFound):
        return ApiError(404, "batch_not_found", exc.message)
    if isinstance(exc, BatchExists):
        return ApiError(409, "batch_exists", exc.message)
    if isinstance(exc, PipelineNotFound):
        return ApiError(404, "pipeline_not_found", exc.message)
    if isinstance(exc, RunNotFound):
        return ApiError(404, "run_not_found", exc.message)
    if isinstance(exc, InvalidSignal):
        return ApiError(422, "invalid_signal", exc.message)
    if isinstance(exc, WorkflowError):
        return ApiError(422, "invalid_workflow", exc.message)
    if isinstance(exc, LeaseHeld | LeaseLost):
        return ApiError(409, "busy", exc.message)
    if isinstance(exc, CallNotWaiting):  # decided already, never asked, or the run ended
        return ApiError(409, "call_not_waiting", exc.message)
    if isinstance(exc, RunInert):  # imported, nobody trusted it yet
        return ApiError(409, "run_inert", exc.message)
    if isinstance(exc, RunFolderTaken):  # the id is taken in the state directory
        return ApiError(409, "run_folder_taken", exc.message)
    if isinstance(exc, DamagedHistory):  # that run's history: waiting will not mend it
        return ApiError(500, "damaged_history", exc.message)
    if isinstance(exc, StorageError):
        return ApiError(503, "storage", exc.message)
    state_words = (
        "not paused",
        "already ended",
        "nothing to",
        "can be sent to a run",
        "paused for a tool call",  # approving the run, not the call that waits
    )
    if any(word in exc.message for word in state_words):
        return ApiError(409, "wrong_state", exc.message)
    return ApiError(400, "bad_request", exc.message)
