"""The engines behind the visdep adapters, and the small interface each implements.

An lmms-eval model of visdep (`model_adapters.adapter.EngineAdapter`) is engine-neutral: it reads the model_args,
groups lmms-eval's requests into distinct questions, presents each question (`model_adapters.presentation`: the chat
template and the tokens, through the engine's `templates`), wraps the durable store around the engine from outside
and returns the results in request order. The engine does the rest:

- `arguments`: a declarative spec of its model_args (`settings.Argument`: type, default, whether it changes a
  score). The adapter reads and checks every model_arg against it (`read_arguments`: a bad one is a `VisdepError`
  naming it) and hands the engine the typed values; the audit's settings (`registry.score_settings`) and the
  durable store's key derive from the same spec.
- `load()`: the checkpoint or the server and its templates (`Templates`); `frames` is then its
  `frames.FrameSource`, or None for a text-only model.
- `checkpoint(loaded)`: what was scored (`{"identity", "source"}`), asked before and after loading; `store_key()`:
  what besides the checkpoint and the settings changes float rounding; `run_record()`: what the run records of the
  engine (its version, a server's address).
- `score(questions, batches)`: (loss, is_greedy) per option of every presented question, in batches of its own that
  it reports through `pipeline.Batches`.

A new engine is one module here, a subclass of `Engine`, plus one line in `model_adapters.registry`. Engine modules
import nothing heavy at import time (the registry and the audit read their specs without torch).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

from lmms_eval_tasks.errors import VisdepError
from model_adapters.pipeline import Batches, Presented, Scores
from model_adapters.settings import Argument, read_value


class Templates(Protocol):
    """What presenting a question needs from a model: its chat template and its tokenizer."""

    def render(self, conversations: Sequence[list[dict]]) -> list[str | None]:
        """The chat template over each conversation's messages with the assistant's header after them, as text;
        None where the model has no chat template. All of a task's questions come in one call (an engine may run
        them at once)."""

    def tokenize(self, texts: Sequence[str], add_special_tokens: bool) -> list[list[int]]:
        """Each text's token ids (all of a task's in one call)."""


@dataclass(frozen=True)
class Loaded:
    """What an engine is once loaded, as lmms-eval and the logs see it."""

    name: str  # the model as results name it (`pretrained`: a checkpoint, or a server's model)
    templates: Templates
    description: str  # one log line


class Engine:
    """Base of the engines (the module's docstring). Subclasses set `arguments` and implement the methods."""

    arguments: ClassVar[tuple[Argument, ...]] = ()
    default_batch_size: ClassVar[int] = 1  # questions per batch when lmms-eval gives none
    frames = None  # frames.FrameSource of a vision-language model once loaded; None: a text-only model
    rank: int = 0
    world_size: int = 1

    def __init__(self, adapter: str, arguments: Mapping[str, object]) -> None:
        self.adapter = adapter
        self.arguments = dict(arguments)  # every argument of the spec, typed, defaults filled in (None: not given)

    def load(self) -> Loaded:
        raise NotImplementedError

    def checkpoint(self, loaded: bool) -> dict[str, str]:
        """{"identity", "source"} of what is scored; `loaded`: after `load` (False: before, from the files alone)."""
        raise NotImplementedError

    def store_key(self) -> dict:
        """What besides the adapter, its settings, the checkpoint and visdep's code changes a stored value."""
        raise NotImplementedError

    def run_record(self) -> dict:
        """What the run records of the engine, beside the checkpoint (JSON data; never a secret)."""
        return {}

    def score(self, questions: Sequence[Presented], batches: Batches, batch_size: int) -> list[Scores | None]:
        """(loss, is_greedy) per option of every question, in the order given (`pipeline.Batches`)."""
        raise NotImplementedError

    # lmms-eval reads these through the adapter
    @property
    def model(self):
        return None

    @property
    def device(self):
        return "cpu"

    def close(self) -> None:
        """Release what the engine holds (a client's connections); the adapter calls it when it is deleted."""


def read_arguments(adapter: str, spec: Sequence[Argument], given: Mapping[str, object],
                   own: Sequence[str] = ()) -> dict[str, object]:
    """Every argument of `spec`, read from `given` as its type (`settings.read_value`) or its default. A name in
    neither `spec` nor `own` (the adapter's own arguments), or a value that cannot be read, is a `VisdepError`
    naming it and what is accepted."""
    known = {a.name: a for a in spec}
    unknown = sorted(set(given) - set(known) - set(own))
    if unknown:
        raise VisdepError(f"{adapter}: unknown model_args {unknown}; accepted: {', '.join([*own, *known])}")
    return {name: read_value(adapter, argument, given[name]) if name in given else argument.default
            for name, argument in known.items()}
