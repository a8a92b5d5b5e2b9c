"""Which upstream video tasks visdep twins, and how: `automatic` (the generic path), `adapter`, or refused."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class UpstreamStatus:
    task: str
    benchmark: str
    status: str  # "automatic", "adapter", or "refused: <reason>"


def refusal(task: str) -> str | None:
    """Why `task` is not twinned, or None. (The classification of every upstream video task is the next commit;
    until then no task is refused here.)"""
    return None


def list_upstream() -> list[UpstreamStatus]:
    """Every upstream video task with its status. (The next commit fills it; empty until then.)"""
    return []
