"""The registry of benchmarks: for each one, where its files are (an environment variable naming the download's
root), how its records are read, and where each question's video is; and `load_benchmark`, the one way to read one.

The traffic four are read from their official downloads (`lmms_eval_tasks.traffic`), the general VideoQA three as
lmms-eval's own tasks read them (`lmms_eval_tasks.general`), and a benchmark of one's own through its spec
(`lmms_eval_tasks.spec_data.register_spec` adds it here). The module imports nothing heavy (no torch, no
lmms-eval) so the metrics and the test-set stress test can use it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lmms_eval_tasks import general, traffic
from lmms_eval_tasks.records import BenchmarkDataError, Question
from lmms_eval_tasks.roots import under_root
from lmms_eval_tasks.unusable import BenchmarkData, skip_requested


def _join(root: Path, rel: str) -> Path:
    return root / rel


@dataclass(frozen=True)
class Benchmark:
    name: str
    env_var: str  # the download's root; for a hub benchmark, an optional local copy of the annotations
    layout: str  # what the root must contain, shown in every data error
    load: Callable[[Path | None], BenchmarkData]
    categories: tuple[str, ...] = ()
    hub: general.HubDataset | None = None  # general VideoQA: read from the Hugging Face dataset when env_var is unset
    general: bool = False  # tagged visdep_general; the traffic four are visdep_blind / visdep_video
    spec: Path | None = None  # a benchmark described by a spec file
    default_root: Path | None = None  # the root when env_var is unset (a spec's root_default)
    display: str = ""  # the name tables and plots show (default: the name)
    find_video: Callable[[Path, str], Path] = _join  # (video folder, a question's `video`) -> its path
    skip_unusable: bool = False  # run on the usable questions without the environment's switch (a spec's key)

    @property
    def title(self) -> str:
        return self.display or self.name

    def video_path(self, root: Path, rel: str) -> Path:
        """The path of a question's video under the video folder `root` (`find_video`); OutsideRootError unless it
        lies under the root once symlinks are resolved (`roots.under_root`): checked before any search, whose
        pattern must stay under the root too, and on what was found."""
        under_root(root, rel)
        return under_root(root, self.find_video(root, rel))


_GENERAL_LAYOUTS = {
    "videomme": "a local copy of lmms-eval/Video-MME's test split (videomme/test-00000-of-00001.parquet, a json or "
                "jsonl of its records, or a save_to_disk folder); videos in $VIDEOMME_VIDEOS or "
                "$HF_HOME/videomme/data/<videoID>.mp4",
    "longvideobench": "a local copy of longvideobench/LongVideoBench's validation split "
                      "(validation-00000-of-00001.parquet, lvb_val.json, or a save_to_disk folder); videos in "
                      "$LONGVIDEOBENCH_VIDEOS or $HF_HOME/datasets/longvideobench/videos/<video_path>",
    "mlvu": "a local copy of sy1998/MLVU_dev's test split (mlvu/test-00000-of-00001.parquet, a json or jsonl of "
            "its records, or a save_to_disk folder; videos in $MLVU_VIDEOS or $HF_HOME/mlvu/<video_name>), or the "
            "MLVU release's data/ folder (<n>_<type>.json) or one of its files (videos in $MLVU_VIDEOS, the "
            "release's video/ folder: <n>_<type>/<video>)",
}

BENCHMARKS: dict[str, Benchmark] = {
    "mmau": Benchmark(
        "mmau", "MMAU_ROOT",
        "the MM-AU download: 'ArA label/test.json' and 'Reason_Answering/data/dada/testData.xls' (annotations), "
        "'CAP-DATA/<group>/<type>/<id>/images/*.jpg' and 'DADA-DATA/<type>/<id>/images/*.png' (frames)",
        traffic.load_mmau, display="MM-AU", find_video=traffic.find_mmau_frames),
    "vru_accident": Benchmark(
        "vru_accident", "VRU_ACCIDENT_ROOT",
        "the VRU-Accident download: 'MetaData/<SRC>/<SRC>_VQA_annotation.json' for SRC in "
        f"{', '.join(traffic.VRU_SOURCES)}, videos in 'VRU_videos/<SRC>/VRU_<n>.mp4'",
        traffic.load_vru_accident, traffic.VRU_CATEGORIES, display="VRU-Accident"),
    "trafficqa": Benchmark(
        "trafficqa", "TRAFFICQA_ROOT",
        "the SUTD-TrafficQA download: 'annotations/R2_test.jsonl' (or 'R2_test.jsonl'), videos in "
        "'raw_videos/<vid_filename>'",
        traffic.load_trafficqa, tuple(traffic.TRAFFICQA_TYPES.values()), display="TrafficQA"),
    "accidentbench": Benchmark(
        "accidentbench", "ACCIDENTBENCH_ROOT",
        "the AccidentBench download: 'land_space/{short,medium,long}/{easy,medium,hard}/<reasoning_style>.json', "
        "videos in 'videos/<scene_name>.mp4'",
        traffic.load_accidentbench, traffic.ACCIDENTBENCH_STYLES, display="AccidentBench"),
    "videomme": Benchmark(
        "videomme", "VIDEOMME_ANNOTATIONS", _GENERAL_LAYOUTS["videomme"], general.load_videomme,
        general.VIDEOMME_TASK_TYPES, hub=general.VIDEOMME, general=True, display="Video-MME",
        find_video=general.find_videomme_video),
    "longvideobench": Benchmark(
        "longvideobench", "LONGVIDEOBENCH_ANNOTATIONS", _GENERAL_LAYOUTS["longvideobench"],
        general.load_longvideobench, general.LONGVIDEOBENCH_CATEGORIES, hub=general.LONGVIDEOBENCH, general=True,
        display="LongVideoBench"),
    "mlvu": Benchmark(
        "mlvu", "MLVU_ANNOTATIONS", _GENERAL_LAYOUTS["mlvu"], general.load_mlvu, general.MLVU_TASK_TYPES,
        hub=general.MLVU, general=True, display="MLVU"),
}
TRAFFIC_BENCHMARKS = tuple(name for name, b in BENCHMARKS.items() if not b.general)
GENERAL_BENCHMARKS = tuple(name for name, b in BENCHMARKS.items() if b.general)


def get_benchmark(name: str) -> Benchmark:
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise BenchmarkDataError(f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}") from None


def benchmark_root(name: str, root: str | os.PathLike | None = None) -> Path | None:
    """The root folder of a benchmark: `root` if given, else its environment variable, else a spec's root_default.
    For a hub benchmark, the local copy of its annotations (a file or folder), or None: the Hugging Face dataset
    (or its cache)."""
    bench = get_benchmark(name)
    given = f"{bench.env_var}={root}"  # what the message names: where the root came from
    if root is None:
        value = os.environ.get(bench.env_var)
        given = f"{bench.env_var}={value}"
        if not value:
            if bench.hub is not None:
                return None
            if bench.default_root is None:
                raise BenchmarkDataError(f"{bench.env_var} is not set. Point it at {bench.layout}, e.g. export "
                                         f"{bench.env_var}=/data/{name}")
            value = bench.default_root
            given = f"{bench.env_var} unset, so the spec's root_default {value}"
        root = value
    path = Path(root).expanduser()
    if bench.hub is not None:
        if not path.exists():
            raise BenchmarkDataError(f"{given}: not found. Expected {bench.layout}")
        return path
    if not path.is_dir():
        raise BenchmarkDataError(f"{given}: not a directory. Expected {bench.layout}")
    return path


def video_root(name: str) -> Path:
    """The folder a benchmark's `video` paths are relative to: the download's root (traffic, specs), or where
    lmms-eval's own task keeps the videos, `$<NAME>_VIDEOS` overriding it (general VideoQA)."""
    bench = get_benchmark(name)
    if bench.hub is not None:
        return bench.hub.video_root()
    return benchmark_root(name)


def resolve_video(name: str, rel: str) -> Path:
    """The path of a question's video (a video file or a frame folder), as its benchmark finds it; OutsideRootError
    where it is not under the benchmark's video folder (`Benchmark.video_path`)."""
    return get_benchmark(name).video_path(video_root(name), rel)


def skip_unusable(name: str) -> bool:
    """Whether benchmark `name` runs on its usable questions: the environment's switch, or its spec's key."""
    return skip_requested() or get_benchmark(name).skip_unusable


def read_benchmark(name: str, root: str | os.PathLike | None = None) -> BenchmarkData:
    """Every record of benchmark `name` from `root` (default: its environment variable, or for a hub benchmark its
    Hugging Face dataset), each one a question or unusable.

    Raises BenchmarkDataError naming the variable, the path tried and the layout expected where a file is missing
    or not in the official format."""
    bench = get_benchmark(name)
    path = benchmark_root(name, root)
    origin = f"{bench.env_var}={path}" if path is not None else f"{bench.env_var} unset, so {bench.hub.repo}"
    if root is None and bench.default_root is not None and not os.environ.get(bench.env_var):
        origin = f"{bench.env_var} unset, so the spec's root_default {path}"
    try:
        data = bench.load(path)
    except FileNotFoundError as e:
        raise BenchmarkDataError(f"{origin}: {e.filename} not found. Expected {bench.layout}") from e
    except BenchmarkDataError as e:  # its own class kept (a spec's SpecError)
        raise type(e)(f"{origin}: {e}. Expected {bench.layout}") from e
    if not data.questions and not data.unusable:
        raise BenchmarkDataError(f"{origin}: no questions found. Expected {bench.layout}")
    data.origin = origin if bench.spec is None else f"spec {bench.spec}, {origin}"
    return data


def load_benchmark(name: str, root: str | os.PathLike | None = None, skip: bool | None = None) -> list[Question]:
    """The usable questions of benchmark `name` (see `read_benchmark`). A record that cannot be used is an error
    listing all of them, unless `skip` (default: `skip_unusable(name)`) leaves them out (logged)."""
    return read_benchmark(name, root).usable(skip_unusable(name) if skip is None else skip)
