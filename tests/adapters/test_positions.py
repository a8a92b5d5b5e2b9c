"""Qwen2-VL / Qwen2.5-VL rotary positions: the text after a video starts one past the largest position before it.

The expected positions are written out here from the examples in the docstrings of Qwen's own training code
(qwen-vl-finetune's `get_rope_index_2` and `get_rope_index_25`): a video of 3 temporal patches on a 2 × 2 merged
grid, then 5 text tokens. Qwen2-VL: vision temporal 0, 1, 2 (four tokens each), text 3 .. 7. Qwen2.5-VL with 50
positions per temporal patch (tokens_per_second 2 × 25 s per patch): vision temporal 0, 50, 100, text 101 .. 105;
with 1.25 s per patch (16 frames of a 10 s clip), 2.5 positions per patch, cut down: 0, 2, 5, text 6 .. 10.
transformers 5.24's `get_rope_index` starts that text at 2 in both (the merged grid's larger side), which these
tests refuse: the adapters' `prefix_positions` and the test reference `qwen_position_ids` are both checked. So is
5.17's spacing of 2 per patch at 1.25 s (its `get_rope_index` cut the seconds to whole ones, which visdep never calls).
"""

from __future__ import annotations

import pytest
import torch

from model_adapters.families import family_of, prefix_positions
from tests.adapters.independent_reference import qwen_position_ids

GRID = [3, 4, 4]  # 3 temporal patches of 4 × 4 patches, merged 2 × 2: 12 video tokens
TEXT_BEFORE = 3
TEXT_AFTER = 5


# Qwen2.5-VL's seconds per temporal patch -> the temporal positions of its 3 patches, and where the text after starts
QWEN2_5_VL_TIMING = {25.0: ([0, 50, 100], 101), 1.25: ([0, 2, 5], 6)}


def expected(kind: str, text_before: int, seconds: float = 25.0) -> list[list[int]]:
    """(temporal, height, width) positions of `text_before` text tokens, the video, then TEXT_AFTER text tokens."""
    steps, after = ([0, 1, 2], 3) if kind == "qwen2_vl" else QWEN2_5_VL_TIMING[seconds]
    lead = list(range(text_before))
    temporal = [step for step in steps for _ in range(4)]
    height = [0, 0, 1, 1] * 3
    width = [0, 1, 0, 1] * 3
    tail = list(range(after, after + TEXT_AFTER))
    return [lead + [p + text_before for p in axis] + [p + text_before for p in tail]
            for axis in (temporal, height, width)]


def video_inputs(model, kind: str, text_before: int, seconds: float = 25.0) -> dict:
    text_token = 0  # any token that is neither a vision token nor a video/image placeholder
    video = model.config.video_token_id
    n_video = GRID[0] * (GRID[1] // 2) * (GRID[2] // 2)
    ids = torch.tensor([[text_token] * text_before + [video] * n_video + [text_token] * TEXT_AFTER])
    inputs = {"input_ids": ids, "mm_token_type_ids": (ids == video).long() * 2,
              "video_grid_thw": torch.tensor([GRID])}
    if kind == "qwen2_5_vl":
        inputs["second_per_grid_ts"] = torch.tensor([seconds])
    return inputs


@pytest.fixture(scope="module")
def models(tiny_models):
    from transformers import AutoModelForImageTextToText

    return {kind: AutoModelForImageTextToText.from_pretrained(tiny_models[kind]).eval()
            for kind in ("qwen2_vl", "qwen2_5_vl")}


CASES = [("qwen2_vl", 25.0), ("qwen2_5_vl", 25.0), ("qwen2_5_vl", 1.25)]
CASE_IDS = ["qwen2_vl", "qwen2_5_vl 25 s per patch", "qwen2_5_vl 1.25 s per patch"]


@pytest.mark.parametrize("text_before", [0, TEXT_BEFORE], ids=["video first", "text, video, text"])
@pytest.mark.parametrize("kind,seconds", CASES, ids=CASE_IDS)
def test_the_adapters_start_the_text_after_a_video_one_past_its_largest_position(models, kind, seconds, text_before):
    model = models[kind]
    assert model.config.vision_config.spatial_merge_size == 2
    if kind == "qwen2_5_vl":
        assert model.config.vision_config.tokens_per_second == 2
    inputs = video_inputs(model, kind, text_before, seconds)
    positions, next_position = prefix_positions(family_of(model.config), model, inputs)
    assert positions.shape == (3, 1, inputs["input_ids"].shape[1])
    assert positions[:, 0].tolist() == expected(kind, text_before, seconds)
    assert next_position == expected(kind, text_before, seconds)[0][-1] + 1


@pytest.mark.parametrize("text_before", [0, TEXT_BEFORE], ids=["video first", "text, video, text"])
@pytest.mark.parametrize("kind,seconds", CASES, ids=CASE_IDS)
def test_the_reference_positions_are_qwens_examples(models, kind, seconds, text_before):
    inputs = video_inputs(models[kind], kind, text_before, seconds)
    assert qwen_position_ids(models[kind].config, inputs)[:, 0].tolist() == expected(kind, text_before, seconds)


def test_transformers_own_rule_differs_there(models):
    """What the tests above guard against: transformers 5's `get_rope_index` puts this text elsewhere (if a later
    transformers follows Qwen's rule, this test says so, and the adjustment can go)."""
    model = models["qwen2_vl"]
    inputs = video_inputs(model, "qwen2_vl", TEXT_BEFORE)
    positions, _ = model.model.get_rope_index(inputs["input_ids"], mm_token_type_ids=inputs["mm_token_type_ids"],
                                              video_grid_thw=inputs["video_grid_thw"])
    first_text_after = TEXT_BEFORE + 12
    assert positions[0, 0, first_text_after].item() == TEXT_BEFORE + 2  # the merged grid's larger side
    assert expected("qwen2_vl", TEXT_BEFORE)[0][first_text_after] == TEXT_BEFORE + 3


@pytest.mark.parametrize("kind", ["qwen2_vl", "qwen2_5_vl"])
def test_batched_padded_positions_are_each_rows_own(models, kind):
    """What the demo trains with: `qwen_positions` of a padded batch (rows of text and 0-2 videos of random grids and
    timings, padded right or left) gives each row's unmasked tokens the reference's positions of that row alone;
    masked tokens 0."""
    import random

    from model_adapters.families import qwen_positions

    model, rng = models[kind], random.Random(0)
    video, text = model.config.video_token_id, 20
    for _ in range(60):
        rows, grids, seconds = [], [], []
        for _ in range(rng.randint(1, 3)):
            ids, row_grids, row_seconds = [text] * rng.randint(1, 4), [], []
            for _ in range(rng.randint(0, 2)):
                grid = [rng.randint(1, 9), 2 * rng.randint(1, 3), 2 * rng.randint(1, 3)]
                row_grids.append(grid)
                row_seconds.append(rng.uniform(0.05, 150))
                ids += [video] * (grid[0] * grid[1] * grid[2] // 4) + [text] * rng.randint(1, 4)
            rows.append((ids, row_grids, row_seconds))
            grids += row_grids
            seconds += row_seconds
        width, left = max(len(r[0]) for r in rows), rng.random() < 0.5
        pad = [[0] * (width - len(r[0])) for r in rows]
        ids = torch.tensor([p + r[0] if left else r[0] + p for r, p in zip(rows, pad, strict=True)])
        mask = torch.tensor([[0] * len(p) + [1] * len(r[0]) if left else [1] * len(r[0]) + [0] * len(p)
                             for r, p in zip(rows, pad, strict=True)])
        inputs = {"input_ids": ids, "attention_mask": mask, "mm_token_type_ids": (ids == video).long() * 2}
        if grids:
            inputs["video_grid_thw"] = torch.tensor(grids)
            if kind == "qwen2_5_vl":
                inputs["second_per_grid_ts"] = torch.tensor(seconds)
        got = qwen_positions(model, inputs)
        assert (got[:, mask == 0] == 0).all()
        for b, (row, row_grids, row_seconds) in enumerate(rows):
            alone = {"input_ids": torch.tensor([row])}
            if row_grids:
                alone |= {"video_grid_thw": torch.tensor(row_grids), "second_per_grid_ts": torch.tensor(row_seconds)}
                expected = qwen_position_ids(model.config, alone)[:, 0]
            else:
                expected = torch.arange(len(row)).expand(3, -1)
            assert got[:, b, mask[b] == 1].tolist() == expected.tolist()
