"""Question sources: where a benchmark's questions and videos come from, and the one way to read them.

A *question source* (`QuestionSource`) is the task layer's unit: it reads every record of a benchmark (each one a
question or unusable), says where a question's video is, and names itself in a task's data file (`reference`), from
which the generic task functions (`lmms_eval_tasks.tasks.docs_blind` / `docs_video`) open it again. Three kinds
implement it:

- the built-in benchmarks (`BENCHMARKS`, fixed): the traffic four read from their official downloads
  (`lmms_eval_tasks.traffic`), the general VideoQA three as lmms-eval's own tasks read them
  (`lmms_eval_tasks.general`); a data file line `{"benchmark": NAME}`;
- a benchmark of one's own described by a spec (`lmms_eval_tasks.spec_data.open_spec`; `{"spec": PATH}`);
- the twin of an upstream lmms-eval task frozen by `visdep twin` (`lmms_eval_tasks.twin.open_twin`; `{"twin": PATH}`).

`BENCHMARKS` is never changed. Sources opened from files (a spec, a twin) are known by name to the process that
opened them (`open_source`, `get_benchmark`), so that a command given `--spec` or `--twin`, or an lmms-eval process
whose task named one in its data file, finds them as it finds a built-in. The module imports nothing heavy (no
torch, no lmms-eval) so the metrics and the test-set stress test can use it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Protocol, runtime_checkable

from lmms_eval_tasks import general, traffic
from lmms_eval_tasks.evaluation import current
from lmms_eval_tasks.records import BenchmarkDataError, Question
from lmms_eval_tasks.roots import under_root
from lmms_eval_tasks.task_yaml import TASKS_DIR, spec_task_path
from lmms_eval_tasks.unusable import BenchmarkData, skip_requested


@runtime_checkable
class QuestionSource(Protocol):
    """Where a benchmark's questions come from: what the task functions, the video check, the stress test, the
    audit and the subset export need of a built-in benchmark, a spec's or an upstream task's twin."""

    name: str  # the benchmark's name in every record; its tasks are <name>_blind and <name>_video
    categories: tuple[str, ...]  # the categories its tasks report accuracy for, in order
    skip_unusable: bool  # run on the usable records without the environment's switch

    @property
    def title(self) -> str:
        """The name tables and plots show."""

    def read(self, root: str | os.PathLike | None = None) -> BenchmarkData:
        """Every record, each one a question or unusable; BenchmarkDataError where the files cannot be read."""

    def video_path(self, video: str, question_id: str = "", root: Path | None = None) -> Path:
        """The path of a question's video (a file or a frame folder; it may not exist), under `root` where one is
        given in place of the source's own. RecordError (with its reason) where the source cannot say, or where the
        video is not under its root (`roots.OutsideRootError`)."""

    def video_origin(self) -> str:
        """Where the videos are looked for, for a message naming videos that cannot be used ('' if obvious)."""

    def reference(self) -> dict[str, str]:
        """What a task's data file says to name this source (every line of a subset's id list says it too)."""

    def task_file(self, mode: str) -> Path:
        """The full `<name>_<mode>` task's YAML, which exported subsets copy."""


def _join(root: Path, rel: str) -> Path:
    return root / rel


@dataclass(frozen=True)
class Benchmark:
    """A built-in benchmark, or one a spec describes (`spec` set): files under a root an environment variable
    names."""

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

    def root(self, root: str | os.PathLike | None = None) -> Path | None:
        """The root folder: `root` if given, else the environment variable, else a spec's root_default. For a hub
        benchmark, the local copy of its annotations (a file or folder), or None: the Hugging Face dataset (or its
        cache)."""
        given = f"{self.env_var}={root}"  # what the message names: where the root came from
        if root is None:
            value = os.environ.get(self.env_var)
            given = f"{self.env_var}={value}"
            if not value:
                if self.hub is not None:
                    return None
                if self.default_root is None:
                    raise BenchmarkDataError(f"{self.env_var} is not set. Point it at {self.layout}, e.g. export "
                                             f"{self.env_var}=/data/{self.name}")
                value = self.default_root
                given = f"{self.env_var} unset, so the spec's root_default {value}"
            root = value
        path = Path(root).expanduser().absolute()  # a relative root names a folder under the working one, once
        if self.hub is not None:
            if not path.exists():
                raise BenchmarkDataError(f"{given}: not found. Expected {self.layout}")
            return path
        if not path.is_dir():
            raise BenchmarkDataError(f"{given}: not a directory. Expected {self.layout}")
        return path

    def video_folder(self) -> Path:
        """The folder the `video` paths are relative to: the download's root (traffic, specs), or where lmms-eval's
        own task keeps the videos, `$<NAME>_VIDEOS` overriding it (general VideoQA)."""
        return self.hub.video_root() if self.hub is not None else self.root()

    def video_path(self, video: str, question_id: str = "", root: Path | None = None) -> Path:
        """The path of a question's video under the video folder (`root` in its place: the explorer's
        --video-root), found by `find_video`; OutsideRootError unless it lies under that folder once symlinks are
        resolved (`roots.under_root`): checked before any search, whose pattern must stay under it too, and on what
        was found."""
        root = self.video_folder() if root is None else Path(root).expanduser().absolute()
        under_root(root, video)
        return under_root(root, self.find_video(root, video))

    def video_origin(self) -> str:
        if self.spec is None:
            return ""
        return f"the videos are fields.video of {self.spec}, under {self.video_folder()}"

    def read(self, root: str | os.PathLike | None = None) -> BenchmarkData:
        """Every record from `root` (default: the environment variable, or for a hub benchmark its Hugging Face
        dataset), each one a question or unusable.

        Raises BenchmarkDataError naming the variable, the path tried and the layout expected where a file is
        missing or not in the official format."""
        path = self.root(root)
        origin = f"{self.env_var}={path}" if path is not None else f"{self.env_var} unset, so {self.hub.repo}"
        if root is None and self.default_root is not None and not os.environ.get(self.env_var):
            origin = f"{self.env_var} unset, so the spec's root_default {path}"
        try:
            data = self.load(path)
        except FileNotFoundError as e:
            raise BenchmarkDataError(f"{origin}: {e.filename} not found. Expected {self.layout}") from e
        except BenchmarkDataError as e:  # its own class kept (a spec's SpecError)
            raise type(e)(f"{origin}: {e}. Expected {self.layout}") from e
        if not data.questions and not data.unusable:
            raise BenchmarkDataError(f"{origin}: no questions found. Expected {self.layout}")
        data.origin = origin if self.spec is None else f"spec {self.spec}, {origin}"
        return data

    def reference(self) -> dict[str, str]:
        return {"benchmark": self.name} if self.spec is None else {"spec": str(self.spec)}

    def task_file(self, mode: str) -> Path:
        if self.spec is None:
            return TASKS_DIR / self.name / f"{self.name}_{mode}.yaml"
        path = spec_task_path(self.spec, self.name, mode)
        if not path.is_file():
            raise BenchmarkDataError(f"{path}: not found; write the tasks of {self.name} first: visdep spec init "
                                     f"{self.spec}")
        return path


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

BENCHMARKS: Mapping[str, Benchmark] = MappingProxyType({
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
})
TRAFFIC_BENCHMARKS = tuple(name for name, b in BENCHMARKS.items() if not b.general)
GENERAL_BENCHMARKS = tuple(name for name, b in BENCHMARKS.items() if b.general)


def _opened() -> dict[str, QuestionSource]:
    """The sources opened from files (specs, twins) by name: the current evaluation's (`evaluation.current`), so that
    one evaluation's sources are no other's; outside any, those of the process's commands."""
    return current().sources


def open_source(source: QuestionSource) -> QuestionSource:
    """Make a source opened from a file (a spec, a twin) known by its name to the current evaluation; the same file
    opened again replaces it (an edited spec is read anew). A name a built-in benchmark or another file's source has
    is refused."""
    taken = BENCHMARKS.get(source.name) or _opened().get(source.name)
    if taken is not None and taken.reference() != source.reference():
        owner = ("a built-in visdep benchmark" if source.name in BENCHMARKS
                 else f"the benchmark of {next(iter(taken.reference().values()))}")
        raise BenchmarkDataError(f"{next(iter(source.reference().values()))}: the benchmark name {source.name!r} is "
                                 f"already {owner}; choose another name")
    _opened()[source.name] = source
    return source


def known_benchmarks() -> dict[str, QuestionSource]:
    """Every benchmark the current evaluation knows by name: the built-ins, then the sources it opened, in order."""
    return {**BENCHMARKS, **_opened()}


def get_benchmark(name: str) -> QuestionSource:
    known = known_benchmarks()
    try:
        return known[name]
    except KeyError:
        raise BenchmarkDataError(f"unknown benchmark {name!r}; known: {', '.join(known)}") from None


def benchmark_root(name: str, root: str | os.PathLike | None = None) -> Path | None:
    """The root folder of a benchmark read from files under a root (`Benchmark.root`)."""
    return get_benchmark(name).root(root)


def resolve_video(name: str, rel: str, question_id: str = "") -> Path:
    """The path of a question's video (a video file or a frame folder), as its source finds it; a RecordError
    (OutsideRootError where it is not under the benchmark's video folder) where it cannot be used."""
    return get_benchmark(name).video_path(rel, question_id)


def skip_unusable(name: str) -> bool:
    """Whether benchmark `name` runs on its usable questions: the environment's switch, or its source's."""
    return skip_requested() or get_benchmark(name).skip_unusable


def read_benchmark(name: str, root: str | os.PathLike | None = None) -> BenchmarkData:
    """Every record of benchmark `name` (`QuestionSource.read`)."""
    return get_benchmark(name).read(root)


def load_benchmark(name: str, root: str | os.PathLike | None = None, skip: bool | None = None) -> list[Question]:
    """The usable questions of benchmark `name` (see `read_benchmark`). A record that cannot be used is an error
    listing all of them, unless `skip` (default: `skip_unusable(name)`) leaves them out (logged)."""
    return read_benchmark(name, root).usable(skip_unusable(name) if skip is None else skip)
