"""The toy run tree several audit tests share."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.runs import log_probabilities, visdep_record, write_run


@pytest.fixture
def toy_tree(tmp_path):
    """Two blind-only text LLMs, two VLMs and one held-out VLM on a 12-question MM-AU-like set."""
    rng = np.random.default_rng(7)
    n, k = 12, 5
    root = tmp_path / "runs"

    def logprobs_for(kind):
        return [log_probabilities(rng.normal(0, 1.5, k)) for _ in range(n)]

    def records(mode, lps):
        return [visdep_record(f"cap-{i}", "mmau", mode, i % k, lp) for i, lp in enumerate(lps)]

    for model in ("org/llm-a", "org/llm-b"):
        write_run(root, model, {"mmau_blind": records("blind", logprobs_for("blind"))}, model_type="visdep_llm")
    for model in ("org/vlm-a", "org/vlm-b", "org/vlm-heldout"):
        write_run(root, model, {"mmau_blind": records("blind", logprobs_for("blind")),
                                "mmau_video": records("video", logprobs_for("video"))})
    return root
