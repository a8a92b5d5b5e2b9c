"""The task layer's seam: one generic `docs_blind` / `docs_video` pair opens the question source a task's data file
names, a built-in benchmark, a spec or an upstream task's twin, and the built-in registry is never changed."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import datasets
import numpy as np
import pytest
import yaml

from lmms_eval_tasks import evaluation, tasks
from lmms_eval_tasks.export import write_subset_tasks
from lmms_eval_tasks.layouts import write_mp4
from lmms_eval_tasks.loaders import BENCHMARKS, get_benchmark, known_benchmarks
from lmms_eval_tasks.records import BenchmarkDataError, Question, RecordError
from lmms_eval_tasks.spec import read_spec
from lmms_eval_tasks.spec_data import register_spec
from lmms_eval_tasks.task_yaml import TASKS_DIR, write_spec_tasks
from lmms_eval_tasks.twin import freeze_twin, open_twin
from lmms_eval_tasks.unusable import Unusable

BUILT_IN = ("mmau", "vru_accident", "trafficqa", "accidentbench", "videomme", "longvideobench", "mlvu")


def _mp4(path: Path) -> Path:
    write_mp4(path, np.full((4, 16, 16, 3), 90, np.uint8))
    return path


def _data(*lines: dict, split: str = "test") -> datasets.Dataset:
    """What lmms-eval hands process_docs: the task's data file as a dataset."""
    return datasets.Dataset.from_list(list(lines), split=split)


def test_tasks_has_one_document_pair_and_every_built_in_task_names_its_benchmark_in_its_data_file():
    assert sorted(n for n in vars(tasks) if n.endswith(("_docs_blind", "_docs_video"))) == []
    assert tuple(BENCHMARKS) == BUILT_IN
    seen = []
    for path in sorted(TASKS_DIR.glob("*/*.yaml")):
        config = yaml.safe_load(path.read_text().replace("!function ", ""))
        benchmark, mode = config["task"].rsplit("_", 1)
        assert config["process_docs"] == f"lmms_eval_tasks.tasks.docs_{mode}", path
        data_file = path.parent / config["dataset_kwargs"]["data_files"]["test"]
        assert [json.loads(line) for line in data_file.read_text().splitlines()] == [{"benchmark": benchmark}]
        seen.append((benchmark, mode))
    assert sorted(seen) == sorted((b, m) for b in BUILT_IN for m in ("blind", "video"))


def test_the_built_in_registry_is_never_changed(tmp_path):
    with pytest.raises(TypeError):
        BENCHMARKS["mine"] = BENCHMARKS["mmau"]  # type: ignore[index]
    spec = _spec(tmp_path)
    bench = register_spec(spec)
    assert tuple(BENCHMARKS) == BUILT_IN and "shapes" in known_benchmarks() and get_benchmark("shapes") is bench
    assert register_spec(spec) is not bench  # the same file again: read anew, replacing it
    other = tmp_path / "other"
    other.mkdir()
    (other / "questions.csv").write_text((tmp_path / "questions.csv").read_text())
    with pytest.raises(BenchmarkDataError, match="'shapes' is already the benchmark of .*shapes.yaml"):
        register_spec(_spec(other))
    with pytest.raises(BenchmarkDataError, match="'mmau' is already a built-in visdep benchmark"):
        register_spec(_spec(other, name="mmau"))


# --------------------------------------------------------------------------- three sources, one interface
def _spec(folder: Path, name: str = "shapes") -> Path:
    rows = ["id,clip,question,A,B,C,answer", "1,c1,What moves?,a ball,a cube,a cone,B", "2,c2,What stops?,x,y,z,A"]
    if not (folder / "questions.csv").exists():
        (folder / "questions.csv").write_text("\n".join(rows) + "\n")
    for clip in ("c1", "c2"):
        _mp4(folder / "v" / f"{clip}.mp4")
    spec = folder / f"{name}.yaml"
    spec.write_text(f"name: {name}\nroot_default: .\nannotations: questions.csv\nanswer_is: letter\nfields:\n"
                    "  question_id: 'q-{id}'\n  question: '{question}'\n  options: ['{A}', '{B}', '{C}']\n"
                    "  answer: '{answer}'\n  video: 'v/{clip}.mp4'\n")
    return spec


def _upstream_twin(task: str, videos: dict[str, str]) -> types.SimpleNamespace:
    """What `lmms_eval_tasks.upstream.read_upstream` returns, written by hand: three questions (the third about
    video 'gone'), one record dropped, and the upstream documents the videos are resolved from."""
    questions = [Question(question_id=f"{task}-{i}", benchmark=task, video=v, question=f"Which one, {i}?",
                          options=["red", "green", "blue"], answer_index=i % 3, category=("near", "far")[i % 2])
                 for i, v in enumerate(["a", "b", "gone"])]
    return types.SimpleNamespace(
        task=task, benchmark="upbench", questions=questions, adapter="generic", lmms_eval_version="0.7.3",
        yaml_path=Path("/up/upbench.yaml"), yaml_sha256="0" * 64, split="test", origin="a test", notes={},
        unusable=[Unusable("upstream record 7", "several correct answers", "x-7", "A, C")],
        documents=[{"videoID": q.video, "path": videos.get(q.video)} for q in questions])


@pytest.fixture
def fake_resolver(monkeypatch):
    """The upstream resolver's contract: the path upstream `doc_to_visual` gives, or RecordError with its reason."""
    calls = []

    def resolve_video(task: str, upstream_doc: dict) -> str:
        calls.append((task, upstream_doc["videoID"]))
        if upstream_doc["path"] is None:
            raise RecordError("the upstream doc_to_visual exited (sys.exit)", f"video {upstream_doc['videoID']}")
        return upstream_doc["path"]

    monkeypatch.setitem(sys.modules, "lmms_eval_tasks.upstream", types.SimpleNamespace(resolve_video=resolve_video))
    return calls


def _sources(tmp_path: Path, monkeypatch) -> dict[str, tuple[dict, str]]:
    """{kind: (the line a task's data file holds, the benchmark's name)} of one source of each kind."""
    from visdep_metrics.demo.fixtures import write_trafficqa_fixture

    write_trafficqa_fixture(tmp_path / "trafficqa", n_questions=4)
    monkeypatch.setenv("TRAFFICQA_ROOT", str(tmp_path / "trafficqa"))
    (tmp_path / "spec").mkdir()
    spec = _spec(tmp_path / "spec")
    write_spec_tasks(read_spec(spec), [])  # what `visdep spec init` writes beside it
    videos = {v: str(_mp4(tmp_path / "up" / f"{v}.mp4")) for v in ("a", "b")}
    files = freeze_twin(_upstream_twin("upbench", videos), tmp_path / "twins")
    return {"built-in": ({"benchmark": "trafficqa"}, "trafficqa"),
            "spec": ({"spec": str(spec.resolve())}, "shapes"),
            "twin": ({"twin": str(files["questions"])}, "upbench_visdep")}


@pytest.mark.parametrize("kind", ["built-in", "spec", "twin"])
def test_each_source_is_opened_from_its_data_file_and_exported_subsets_name_it(kind, tmp_path, monkeypatch,
                                                                                fake_resolver):
    monkeypatch.delenv("VISDEP_SKIP_UNUSABLE", raising=False)
    line, name = _sources(tmp_path, monkeypatch)[kind]
    with evaluation.evaluating(evaluation.Evaluation()):
        blind = tasks.docs_blind(_data(line))
        source = get_benchmark(name)  # opened by the task's documents, known by its name to this process
        assert source.reference() == line
        data = source.read()
        assert blind.to_list() == [q.document() for q in data.questions]
        assert set(blind["benchmark"]) == {name}
        expected_video = [q for q in data.questions if kind != "twin" or q.video != "gone"]
        video = tasks.docs_video(_data(line))
        assert video["question_id"] == [q.question_id for q in expected_video]
        for doc in video.to_list():
            (path,) = tasks.doc_to_visual_video(doc)
            assert Path(path).is_file() and Path(path) == source.video_path(doc["video"], doc["question_id"])
        dropped = dict(evaluation.current().dropped)

        kept = [blind["question_id"][-1], blind["question_id"][0]]
        paths = write_subset_tasks(tmp_path / "export", name, kept, "grounded")
        ids = [json.loads(x) for x in paths[0].read_text().splitlines()]
        assert ids == [{"question_id": q, **line} for q in kept]
        full = yaml.safe_load(source.task_file("blind").read_text().replace("!function ", ""))
        grounded = yaml.safe_load(paths[1].read_text().replace("!function ", ""))
        assert grounded["process_docs"] == full["process_docs"] == "lmms_eval_tasks.tasks.docs_blind"
        assert grounded["metric_list"] == full["metric_list"]
        subset = tasks.docs_blind(_data(*ids, split="grounded"))
        assert subset["question_id"] == blind["question_id"][:1] + blind["question_id"][-1:]  # the source's order
    if kind == "twin":  # dropped when built, listed in every run's results; the missing video in the video run's
        built = {"question_id": "x-7", "where": "upstream record 7", "reason": "several correct answers"}
        assert dropped[f"{name}_blind"] == [built]
        assert dropped[f"{name}_video"] == [built, {"question_id": "upbench-2", "where": "gone",
                                                    "reason": "the upstream doc_to_visual exited (sys.exit)"}]
        assert {vid for _, vid in fake_resolver} == {"a", "b", "gone"}
    else:
        assert dropped == {f"{name}_blind": [], f"{name}_video": []}


def test_a_data_file_that_names_no_source_or_a_moved_one_is_one_clear_error(tmp_path):
    with pytest.raises(BenchmarkDataError, match="names no question source"):
        tasks.docs_blind(_data({"subset": "all"}))
    with pytest.raises(BenchmarkDataError, match=r"names several benchmarks: \['mlvu', 'mmau'\]"):
        tasks.docs_blind(_data({"question_id": "1", "benchmark": "mmau"}, {"question_id": "2", "benchmark": "mlvu"}))
    with pytest.raises(BenchmarkDataError, match="names the benchmark 'nope', which visdep does not have"):
        tasks.docs_video(_data({"benchmark": "nope"}))
    gone = tmp_path / "t_twin.jsonl"
    with pytest.raises(BenchmarkDataError, match=f"names the twin {gone}, which does not exist .*visdep twin"):
        tasks.docs_blind(_data({"twin": str(gone)}))
    gone.write_text("{}\n")
    with pytest.raises(BenchmarkDataError, match=r"t_twin.json: not found: the twin's manifest"):
        open_twin(gone)


def test_a_blind_run_of_a_twin_reads_the_frozen_file_and_imports_no_upstream_code(tmp_path):
    files = freeze_twin(_upstream_twin("upbench", {}), tmp_path)
    manifest = json.loads(files["manifest"].read_text())
    assert {k: manifest[k] for k in ("task", "name", "lmms_eval_version", "yaml_sha256", "adapter", "questions",
                                     "dropped")} == {
        "task": "upbench", "name": "upbench_visdep", "lmms_eval_version": "0.7.3", "yaml_sha256": "0" * 64,
        "adapter": "generic", "questions": 3, "dropped": {"several correct answers": 1}}
    code = ("import sys, datasets\nfrom lmms_eval_tasks.tasks import docs_blind\n"
            f"docs = docs_blind(datasets.Dataset.from_list([{{'twin': {str(files['questions'])!r}}}]))\n"
            "print(len(docs))\n"
            "print(sorted(m for m in sys.modules if m == 'lmms_eval' or m.startswith(('lmms_eval.', "
            "'lmms_eval_tasks.upstream'))))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["3", "[]"]  # no upstream task, no lmms_eval module at all


@pytest.mark.parametrize("task", ["/abs/path", "../../outside", "sub/dir", ".hidden", "a\nb", 7])
def test_a_manifest_whose_task_reads_as_a_path_is_refused_before_anything_is_written(task, tmp_path):
    """A twin manifest's `task` names the files written for the twin and its grounded exports: one that reads as a
    path (`visdep audit --twin` wrote the grounded tasks there before) is one line naming the manifest; and the
    export itself refuses a source whose name would write its tasks outside OUT."""
    from lmms_eval_tasks.export import write_subset_tasks
    from lmms_eval_tasks.loaders import open_source
    from lmms_eval_tasks.records import BenchmarkDataError
    from lmms_eval_tasks.twin import TWIN_FORMAT, TwinSource, open_twin

    (tmp_path / "t_twin.jsonl").write_text("")
    manifest = {"visdep_twin": TWIN_FORMAT, "task": task}
    (tmp_path / "t_twin.json").write_text(json.dumps(manifest))
    with pytest.raises(BenchmarkDataError, match=r"t_twin\.json: task .* is not an lmms-eval task name"):
        open_twin(tmp_path / "t_twin.jsonl")
    if isinstance(task, str) and "/" in task:  # opened by hand, past the manifest's check
        source = open_source(TwinSource(tmp_path / "t_twin.jsonl", manifest))
        with pytest.raises(ValueError, match="is not a file name .it would be written outside its folder"):
            write_subset_tasks(tmp_path / "out", source.name, ["q"], "grounded")
        # nothing where the name leads (a folder above, /abs), nor in OUT
        assert not (tmp_path / "out").exists() and not (tmp_path / "out" / f"{source.name}_grounded_ids.jsonl").exists()


def test_a_twins_task_yaml_holds_its_categories_and_comment_as_data_only():
    """`visdep twin` writes its tasks with the same writer as `spec init` (`task_yaml.source_task_yaml`): a category
    from the twin's data (a `task_type` field) holding a newline and `!function`, and a comment holding one, leave
    the YAML with visdep's keys only, every `!function` one of visdep's task functions, the comment on one line."""
    import yaml

    from lmms_eval_tasks.task_yaml import source_task_yaml

    hostile = "k0\nx_inj: !function evil.run\n#: {{ doc }}"
    text = source_task_yaml(f"visdep twin of {hostile}", "t_visdep", "video", "t_visdep.jsonl", [hostile, "plain"])
    loader = type("Loader", (yaml.SafeLoader,), {})
    loader.add_constructor("!function", lambda load, node: ("!function", load.construct_scalar(node)))
    config = yaml.load(text, Loader=loader)
    assert "x_inj" not in config and text.count("\n#") == 0 and text.startswith("# visdep twin of k0\\n")
    assert {v[1] for v in config.values() if isinstance(v, tuple)} == {
        f"lmms_eval_tasks.tasks.{name}" for name in ("doc_to_text", "doc_to_choice", "doc_to_target", "docs_video",
                                                     "doc_to_visual_video", "process_results_video")}
    assert [m["metric"] for m in config["metric_list"]] == ["acc", "acc_k0_x_inj_function_evil_run_doc", "acc_plain"]
