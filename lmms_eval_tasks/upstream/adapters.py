"""Adapters: the upstream tasks the generic path cannot read, each told how in the spec language where it suffices
(field templates and `answer_is`, as a benchmark spec says them: docs/specs.md) or by a small function, with a row
filter for a benchmark that mixes multiple-choice and open questions."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass

from lmms_eval_tasks.upstream.generic import Converter


@dataclass(frozen=True)
class Adapter:
    name: str
    tasks: tuple[str, ...]  # fnmatch patterns of the upstream task names it reads
    convert: Converter  # (task, document) -> (stem, options, gold index)
    keep: Callable[[dict], bool] | None = None  # the documents that are multiple-choice questions


ADAPTERS: tuple[Adapter, ...] = ()


def adapter_for(task: str) -> Adapter | None:
    for adapter in ADAPTERS:
        if any(fnmatch.fnmatchcase(task, pattern) for pattern in adapter.tasks):
            return adapter
    return None
