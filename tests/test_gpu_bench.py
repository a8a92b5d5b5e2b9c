"""The GPU bench (`bench/gpu/bench_gpu.py`) cannot rot: it runs here at tiny size on the CPU with only the packages
the GPU machine is said to have (`MACHINE_HAS` and their requirements) and those `bench/gpu/wheelhouse.txt` carries
importable, and its 7B checkpoints have the parameter counts their model cards publish. It uses the machine's own
transformers (5.17 there): the wheelhouse carries none, and `.ci/transformers-range` runs the tiny bench under 5.17
too."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "gpu" / "bench_gpu.py"

# Run before the bench: every module outside the standard library, visdep's own packages and the distributions
# allowed (MACHINE_HAS with their declared requirements, the wheelhouse's) is hidden as if not installed, for
# `import` and `importlib.util.find_spec` alike; what was hidden is printed at exit.
GUARD = r'''
import atexit, importlib.metadata as md, re, sys
from importlib.machinery import PathFinder

def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()

def closure(names):
    seen, todo = set(), [norm(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requirements = md.requires(name) or []
        except md.PackageNotFoundError:
            continue
        todo += [norm(re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0]) for r in requirements if "extra ==" not in r]
    return seen

allowed = closure(MACHINE) | {norm(w) for w in WHEELS}
tops = {"model_adapters", "lmms_eval_tasks", "visdep_metrics", "bench", "bench_gpu", "tests"}
tops |= {top for top, dists in md.packages_distributions().items() if any(norm(d) in allowed for d in dists)}
hidden = set()

class Guard(PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        top = name.partition(".")[0]
        if top not in tops and top not in sys.stdlib_module_names and not top.startswith("_"):
            hidden.add(top)
            return None
        return PathFinder.find_spec(name, path, target)

sys.meta_path = [Guard if finder is PathFinder else finder for finder in sys.meta_path]
atexit.register(lambda: print("HIDDEN " + json.dumps(sorted(hidden)), file=sys.stderr))
'''


def wheelhouse() -> list[str]:
    lines = (REPO / "bench" / "gpu" / "wheelhouse.txt").read_text().splitlines()
    return [line.split("==")[0] for line in lines if line and not line.startswith("#")]


def machine_has() -> tuple[str, ...]:
    source = SCRIPT.read_text()
    return tuple(re.findall(r'"([\w-]+)"', re.search(r"MACHINE_HAS = \(([^)]*)\)", source).group(1)))


def run_guarded(args: list[str], wheels: list[str], script: Path = SCRIPT,
                machine: tuple[str, ...] | None = None) -> subprocess.CompletedProcess:
    machine = machine_has() if machine is None else machine
    prelude = (f"import json, runpy, sys\nMACHINE = {list(machine)!r}\nWHEELS = {wheels!r}\n" + GUARD
               + f"sys.argv = {[str(script), *args]!r}\nrunpy.run_path({str(script)!r}, run_name='__main__')\n")
    return subprocess.run([sys.executable, "-c", prelude], cwd=REPO, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_bf16_bound_runs_at_tiny_size_on_the_cpu_with_only_torch_and_transformers(tmp_path):
    """bench/gpu/bf16_bound.py, the GPU check of docs/adapters.md's bf16 bound, needs nothing but torch and
    transformers (and what they require)."""
    done = run_guarded(["--out", str(tmp_path), "--size", "tiny", "--device", "cpu", "--prompts", "1"], [],
                       SCRIPT.parent / "bf16_bound.py", ("torch", "transformers"))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "bf16_bound.json").read_text())
    assert report["letter"]["n"] == 4 and report["option"]["n"] == 4
    assert 0 < report["letter"]["max_abs_difference"] < 1 and 0 < report["option"]["max_abs_difference"] < 5


@pytest.mark.slow
def test_the_bench_runs_at_tiny_size_on_the_cpu_with_only_the_machines_packages_and_the_wheelhouse(tmp_path):
    out = tmp_path / "out"
    done = run_guarded(["--out", str(out), "--size", "tiny", "--device", "cpu", "--dtype", "float32",
                        "--budget-s", "30", "--max-videos", "12", "--chunk-videos", "2", "--workdir",
                        str(tmp_path / "work")], wheelhouse())
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((out / "gpu_bench.json").read_text())
    rows = {(r["adapter"], r["input"]): r for r in report["results"]}
    assert set(rows) >= {("visdep_vlm", "video"), ("visdep_llm", "blind")}
    for row in rows.values():
        # after the warm-up chunk (2 videos), whole chunks of 2 videos x 6 questions
        assert row["questions"] > 0 and row["questions"] % 12 == 0 and row["questions_per_s"] > 0
    # 16 frames of 64x64 resized to 56x56 (the tiny min = max pixels): 8 temporal patches of 2x2 merged 28-pixel cells
    assert rows[("visdep_vlm", "video")]["visual_tokens_per_video"] == 8 * 2 * 2
    hidden = json.loads(done.stderr.rsplit("HIDDEN ", 1)[1])
    assert "vllm" in hidden and report["skipped"][0]["adapter"] == "visdep_vllm"
    assert "visdep_vlm" in done.stdout and "skipped" in done.stdout


def test_the_wheelhouse_carries_no_transformers_and_the_gpu_machines_is_in_visdeps_range():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import bench_gpu
    finally:
        sys.path.remove(str(SCRIPT.parent))
    assert "transformers" not in wheelhouse()
    required = bench_gpu.transformers_requirement()
    assert required.specifier.contains("5.17.0")  # the lent GPU machine's (Python 3.12, torch 2.11)
    assert not required.specifier.contains("5.16.1")


@pytest.mark.slow
def test_the_guard_can_fail_without_a_wheel_of_the_wheelhouse(tmp_path):
    done = run_guarded(["--out", str(tmp_path), "--size", "tiny", "--device", "cpu", "--max-videos", "2"],
                       [w for w in wheelhouse() if w != "loguru"])
    assert done.returncode != 0 and "No module named 'loguru'" in done.stderr


@pytest.mark.slow
def test_the_7b_checkpoints_have_their_model_cards_parameter_counts(tmp_path):
    """Qwen2.5-7B-Instruct's card: 7.61B parameters, 6.53B without the embeddings (input and output, untied);
    Qwen2.5-VL-7B-Instruct's hub page: 8.29B. Built on the meta device: no memory."""
    import torch
    import transformers as tf

    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import bench_gpu
    finally:
        sys.path.remove(str(SCRIPT.parent))
    folders = bench_gpu.checkpoints("7b", tmp_path)
    with bench_gpu.random_weights("meta"):
        vlm = tf.AutoModelForImageTextToText.from_pretrained(folders["vlm"], dtype=torch.bfloat16)
        llm = tf.AutoModelForCausalLM.from_pretrained(folders["llm"], dtype=torch.bfloat16)
    counts = {name: sum(p.numel() for p in m.parameters()) for name, m in (("vlm", vlm), ("llm", llm))}
    embedding = llm.get_input_embeddings().weight.numel()
    # the cards give two decimals (7.61 for 7.6156: not always rounded), so within 0.01
    assert counts["llm"] / 1e9 == pytest.approx(7.61, abs=0.01)
    assert (counts["llm"] - 2 * embedding) / 1e9 == pytest.approx(6.53, abs=0.01)
    assert counts["vlm"] / 1e9 == pytest.approx(8.29, abs=0.01)
    assert {p.dtype for p in vlm.parameters()} == {torch.bfloat16}
