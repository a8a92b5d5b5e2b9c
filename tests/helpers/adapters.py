"""In-process visdep adapters on tiny checkpoints, lmms-eval requests for them, a forward counter, and the durable
store's record files."""

from __future__ import annotations

import json
from pathlib import Path

from visdep_metrics.demo.tiny import LLM_KINDS

ENGINES = ("hf", "naive")  # the adapters' own scoring core; a test engine implementing only `score`


def make_adapter(kind: str, path: Path, engine: str = "hf", **kwargs):
    """A visdep adapter on the CPU (in float32 unless `dtype` says otherwise), as lmms-eval would build it from
    --model_args; with `engine="naive"`, scoring through the test engine of `tests/helpers/engines.py`."""
    if engine == "naive":
        from tests.helpers.engines import NaiveLLM as VisdepLLM
        from tests.helpers.engines import NaiveVLM as VisdepVLM
    else:
        from model_adapters.adapter import VisdepLLM, VisdepVLM

    cls = VisdepLLM if kind in LLM_KINDS else VisdepVLM
    return cls(pretrained=str(path), device="cpu", **{"dtype": "float32", **kwargs})


def requests_for(adapter, docs: list[dict], video: bool, task: str = "t", choices=None) -> list:
    """lmms-eval's `multiple_choice` requests for `docs` (K per document, contiguous), wired to the
    adapter's task_dict the way the evaluator wires them. `choices(doc)` overrides the task's."""
    from lmms_eval.api.instance import Instance

    from lmms_eval_tasks import tasks

    to_visual = tasks.doc_to_visual_video if video else tasks.doc_to_visual_blind
    adapter.task_dict = {task: {"test": docs}}
    out = []
    for doc_id, doc in enumerate(docs):
        context = tasks.doc_to_text(doc)
        for k, choice in enumerate((choices or tasks.doc_to_choice)(doc)):
            out.append(Instance("loglikelihood", (context, choice, to_visual, doc_id, task, "test"), k,
                                metadata={"task": task, "doc_id": doc_id, "repeats": 1}))
    return out


def set_store_root(root: Path | str | None) -> None:
    """Point the current evaluation's durable store at `root` (None: off), as `--use_cache` would."""
    from lmms_eval_tasks.evaluation import current, store_folder

    current().store_root = store_folder(root)


def set_scoring(mode: str) -> None:
    """The current evaluation's scoring mode (what VISDEP_SCORING sets when lmms-eval starts one)."""
    from lmms_eval_tasks.evaluation import current

    current().scoring = mode


def count_forwards(model) -> list[int]:
    """A one-element list counting the model's forward passes from now on."""
    calls = [0]
    model.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


def store_files(root: Path) -> list[Path]:
    """The record files of every model in the durable store under `root` (lmms-eval's `--use_cache` folder)."""
    return sorted(root.glob("visdep/*/rank*.jsonl"))


def store_records(root: Path) -> list[dict]:
    """Every complete line of the store's record files, parsed (an incomplete last line, cut short by a kill, is
    left out as the store leaves it out)."""
    records = []
    for path in store_files(root):
        *lines, _ = path.read_bytes().split(b"\n")
        records += [json.loads(line) for line in lines]
    return records
