"""The toy run tree several audit tests share."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.helpers.runs import visdep_record, write_run


@pytest.fixture(scope="session", autouse=True)
def hash_cache(tmp_path_factory) -> Path:
    """The audit's cache of file hashes for these tests, not the user's."""
    path = tmp_path_factory.mktemp("hash_cache") / "sha256.json"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VISDEP_HASH_CACHE", str(path))
        yield path


@pytest.fixture
def toy_tree(tmp_path):
    """Two blind-only text LLMs, two VLMs and one held-out VLM on a 12-question MM-AU-like set."""
    rng = np.random.default_rng(7)
    n, k = 12, 5
    root = tmp_path / "runs"

    def logprobs_for(kind):
        return [list(rng.normal(0, 1.5, k)) for _ in range(n)]

    def records(mode, lps):
        return [visdep_record(f"cap-{i}", "mmau", mode, i % k, lp) for i, lp in enumerate(lps)]

    for model in ("org/llm-a", "org/llm-b"):
        write_run(root, model, {"mmau_blind": records("blind", logprobs_for("blind"))}, model_type="visdep_llm")
    for model in ("org/vlm-a", "org/vlm-b", "org/vlm-heldout"):
        write_run(root, model, {"mmau_blind": records("blind", logprobs_for("blind")),
                                "mmau_video": records("video", logprobs_for("video"))})
    return root
