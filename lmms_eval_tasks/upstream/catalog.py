"""Which upstream video tasks visdep twins, and how: `automatic` (the generic path), `adapter`, or refused.

Read from each task's YAML without running its code (lmms-eval's `load_yaml_config` in its "simple" mode, which
leaves `!function` unresolved): a task is a *video task* where its dataset is a video download
(`dataset_kwargs.video`) or its `doc_to_visual` is a function about videos (its name or body says video, or a video
file suffix), never where the function names images only. Its *benchmark* is its folder under lmms-eval's tasks. Its
status comes from, first match: the table of tasks, a variant rule on the task's name (subtitles, lmms-eval's own
blind and perturbed variants), what its YAML asks of the model (a prompt that asks for reasoning before the answer:
a chain-of-thought variant), the table of benchmark folders (read in lmms-eval 0.7.3's utils.py:
docs/twins.md says what each rests on), an adapter, else `refused: not read`. Statuses say `refused: not
multiple-choice` for the open-ended, captioning, grounding and counting tasks: those are not in the count of
multiple-choice benchmarks.
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import re
from dataclasses import dataclass
from pathlib import Path

from lmms_eval_tasks.upstream.adapters import adapter_for

AUTOMATIC, ADAPTER = "automatic", "adapter"
NOT_MC = "refused: not multiple-choice"
NO_GOLD = "refused: no public gold (answers held by the benchmark's server)"
SUBTITLES = "refused: a subtitle variant (its prompt carries the video's speech)"
COT = "refused: a chain-of-thought variant (twin the plain task)"
BLIND = "refused: lmms-eval's own blind variant (twin the task it blinds)"
PERTURBED = "refused: a perturbed variant (its process_docs changes the options or answers)"
MEDIA_OPTIONS = "refused: its options are media (audio, images or videos), not text"
LEAKS = "refused: its blind prompt carries the video's content"
IMAGES = "refused: an image variant (frames or images, no video)"
NOT_READ = "refused: not read (no adapter, and its prompt is not one the generic path was checked on)"

# Variants, by task name (first match). Chain of thought is not among them: it is read from what the task's YAML
# asks of the model (`asks_for_reasoning`); a name says nothing (mvbench_episodic_reasoning is an ordinary subtask).
VARIANTS: tuple[tuple[str, str], ...] = (
    ("*_no_visual", BLIND), ("*subtitle*", SUBTITLES),
    ("*random_choice*", PERTURBED), ("*gt_none_option*", PERTURBED), ("*number_option*", PERTURBED),
    ("*convert_mcq_oe*", PERTURBED), ("*revert_oe_mcq*", PERTURBED), ("*video_only_abcd*", PERTURBED),
    ("*multiimage*", IMAGES),
)
# What a prompt says when it asks the model to reason before it answers (seen in lmms-eval 0.7.3: "think step by
# step", "Write your thinking process first", "First please perform reasoning", "Please perform a detailed
# reasoning", "Begin by explaining your reasoning process").
_REASONING_REQUEST = re.compile(
    r"step[- ]by[- ]step|thinking process|perform (?:a )?(?:detailed )?reasoning|explain(?:ing)? your reasoning"
    r"|chain[- ]of[- ]thought|<think>", re.I)  # not 'reasoning process': MMVU's plain prompt says "Do not generate
# any intermediate reasoning process"
# The YAML keys whose functions write what the model is asked (their text and the module's text constants they use).
PROMPT_FUNCTIONS = ("doc_to_text", "doc_to_messages")

# Tasks whose status differs from their benchmark's.
TASKS: dict[str, str] = {
    "FALCONBench_oq": NOT_MC, "FALCONBench_oq_temploc": NOT_MC,
    "av_speakerbench_audio": "refused: the audio-only variant (no video)",
    "egoschema": NO_GOLD, "egoschema_mcppl": NO_GOLD,
    "longvideobench_test_i": NO_GOLD, "longvideobench_test_v": NO_GOLD,
    "longvideobench_val_i": SUBTITLES,
    "mix_evals_video2text_freeform": NOT_MC, "mix_evals_video2text_freeform_hard": NOT_MC,
    "mix_evals_video2text_openended": NOT_MC,
    "mlvu_test": NO_GOLD,
    "nextqa_oe_test": NOT_MC, "nextqa_oe_val": NOT_MC,
    "ovo_forward": "refused: multi-round streaming questions (one prompt per round)",
    "perceptiontest_test_mc": NO_GOLD, "perceptiontest_test_mcppl": NO_GOLD,
    "rcap_test": NOT_MC, "rdcap_test": NOT_MC, "rtloc_test": NOT_MC, "sgqa_test": NOT_MC,
    "tempcompass_captioning": NOT_MC,
    "tempcompass_yes_no": "refused: yes/no questions without options (no two-way adapter yet)",
    "temporalbench_short_caption": NOT_MC,
    "videoevalpro": NOT_MC,
    "videott_all": "refused: mixes the open-ended variants' records in (twin videott_single_mc)",
    "videott_all_audio": SUBTITLES,
    "videott_single_mc_with_description": LEAKS + " (a description of the video)",
    "videott_correctly_led_oe": NOT_MC, "videott_no_leading_oe": NOT_MC, "videott_paraphrase_oe": NOT_MC,
    "videott_wrongly_led_oe": NOT_MC,
    "videonet_binary_0shot": "refused: few-shot yes/no questions with videos in the prompt",
    "videonet_binary_1shot": "refused: few-shot yes/no questions with videos in the prompt",
    "videonet_binary_2shot": "refused: few-shot yes/no questions with videos in the prompt",
    "videonet_binary_3shot": "refused: few-shot yes/no questions with videos in the prompt",
    "videonet_mcq_test": NO_GOLD,
    "vrbench_process": NOT_MC,
    "worldqa_gen": NOT_MC, "worldvqa": NOT_MC, "worldvqa_gen": NOT_MC,
    "mmou": NO_GOLD,
    "xmod_bench_video_text": AUTOMATIC, "xmod_bench_lite_v2t": AUTOMATIC,  # a video question, text options
}

# Benchmark folders: the status of their tasks (what their utils.py does, docs/twins.md).
BENCHMARKS: dict[str, str] = {
    **dict.fromkeys((
        "FALCONBench", "av_speakerbench", "cgbench", "cover", "egoplan", "egoschema", "egotaskqa", "lemonade",
        "longvideobench", "lsdbench", "lvbench", "minerva", "mix_evals", "mmr_v", "motionbench", "mvbench", "mvp",
        "neptune", "nextqa", "paibench_u", "perceptioncomp", "perceptiontest", "physical_ai_understanding",
        "physical_conflict", "scivideobench", "sis_bench", "sitebench", "tvbench", "vantage_vqa", "video-tt",
        "video_holmes", "videoevalpro", "videomathqa", "videomme", "videomme_v2", "worldqa", "worldvqa",
        "mmou", "plm_videobench", "videonet", "mlvu"), AUTOMATIC),
    **dict.fromkeys((
        "activitynetqa", "av_asr", "capability", "cgav_counting", "charades_sta", "countix", "cuva", "cvrr",
        "egotempo", "extremewhenbench", "funqa", "jumpscore", "longvt", "megabench", "moviechat", "ovr_kinetics",
        "pushupbench", "repcount", "rvos", "ssv2", "timelens", "vatex", "vcrbench", "vdc",
        "video_detail_description", "videochatgpt", "youcook2", "vsisuper",
        "vbvr"), NOT_MC),  # vbvr: the model generates a video
    "av_odyssey": MEDIA_OPTIONS, "xmod_bench": MEDIA_OPTIONS,
    "cinepile": LEAKS + " (the scene's subtitles)", "vrbench": LEAKS + " (a summary of the video)",
    "vinoground": "refused: its questions are in a second file that comes with its videos, not in its documents",
}


# Benchmark folders whose tasks give the model images, though their YAML says `video: True` or their doc_to_visual's
# text says video (read in lmms-eval 0.7.3's utils.py: OmniSpatial opens `image_path` with PIL and names a video only
# in an error message): no video tasks, not listed.
IMAGE_BENCHMARKS = frozenset({"omnispatial"})


@dataclass(frozen=True)
class UpstreamStatus:
    task: str
    benchmark: str  # the task's folder under lmms-eval's tasks
    status: str  # "automatic", "adapter", or "refused: <reason>"

    def line(self) -> str:
        return f"{self.task}\t{self.benchmark}\t{self.status}"


def status(task: str, benchmark: str, reasons_first: bool = False) -> str:
    """The task's status; `reasons_first`: its YAML asks the model to reason before answering."""
    if task in TASKS:
        return TASKS[task]
    if BENCHMARKS.get(benchmark) == NOT_MC:  # its variants too (longvt_no_visual)
        return NOT_MC
    for pattern, reason in VARIANTS:
        if fnmatch.fnmatchcase(task, pattern):
            return reason
    if BENCHMARKS.get(benchmark, "").startswith("refused: "):  # its own reason first (vrbench's prompt leaks too)
        return BENCHMARKS[benchmark]
    if reasons_first:
        return COT
    if adapter_for(task) is not None:
        return ADAPTER
    return BENCHMARKS.get(benchmark, NOT_READ)


def refusal(task: str) -> str | None:
    """Why `task` is not twinned (the text after 'refused: '), or None. A task that is no video task (an image
    task, a task of one's own include path) is left to the reader, which reads or refuses it record by record."""
    from lmms_eval_tasks.upstream.config import find_yaml

    found = classify(task, find_yaml(task))
    if found is None or not found.status.startswith("refused: "):
        return None
    return found.status.removeprefix("refused: ")


_VIDEO_SUFFIX = re.compile(r"video|\.mp4|\.mkv|\.webm|\.avi", re.I)


def _function_source(yaml_path: Path, reference: str) -> str:
    """The text of the function `!function module.name` names (relative to the YAML, as lmms-eval imports it)."""
    module, _, name = reference.rpartition(".")
    path = yaml_path.parent / f"{module.replace('.', '/')}.py"
    if not path.is_file():
        return ""
    text = path.read_text(encoding="utf-8", errors="replace")
    match = re.search(rf"^def {re.escape(name)}\(.*?(?=^\S|\Z)", text, re.S | re.M)
    return match.group(0) if match else ""


def _reference(config: dict, key: str) -> str:
    """The `module.name` a `!function` value of `key` names (the YAML loaded in lmms-eval's simple mode), or ''."""
    value = config.get(key)
    return str(getattr(value, "value", "")) if value is not None and not isinstance(value, str) else ""


def is_video_task(config: dict, yaml_path: Path) -> bool:
    """A video download (`dataset_kwargs.video`) or a `doc_to_visual` about videos; never one whose `doc_to_visual`
    names images only: MixEval-X's image tasks set `video: true` to download their image files."""
    reference = _reference(config, "doc_to_visual")
    name = reference.rpartition(".")[2].lower()
    if "image" in name and "video" not in name:
        return False
    kwargs = config.get("dataset_kwargs")
    if isinstance(kwargs, dict) and kwargs.get("video"):
        return True
    if not reference:
        return False
    return "video" in name or bool(_VIDEO_SUFFIX.search(_function_source(yaml_path, reference)))


def _module_constants(yaml_path: Path, reference: str) -> dict[str, str]:
    """The module-level text constants (`NAME = \"\"\"...\"\"\"`) of the module `reference` names."""
    module = reference.rpartition(".")[0]
    path = yaml_path.parent / f"{module.replace('.', '/')}.py"
    if not path.is_file():
        return {}
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (SyntaxError, ValueError, RecursionError):
        return {}
    constants = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    constants[target.id] = node.value.value
    return constants


def _texts(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _texts(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _texts(v)]
    return []


def _prompt_kwargs(config: dict) -> dict:
    """`lmms_eval_specific_kwargs` as a model with no entry of its own gets them (the mapping updated with its
    `default`, as `config.UpstreamTask.specific_kwargs` reads them; other models' entries left out)."""
    given = config.get("lmms_eval_specific_kwargs")
    if not isinstance(given, dict):
        return {}
    entry = given.get("default", given.get("dataset"))
    return dict(entry) if isinstance(entry, dict) else {k: v for k, v in given.items() if not isinstance(v, dict)}


def asks_for_reasoning(config: dict, yaml_path: Path) -> bool:
    """Whether the task asks the model to reason before it answers (a chain-of-thought variant), by the prompts it
    gives: the text of its `doc_to_text`/`doc_to_messages` functions and the module's text constants they name, and
    the `lmms_eval_specific_kwargs` prompts they read (a key they name; `pre_prompt`/`post_prompt` where the prompt
    is no function). A prompt the task holds but does not use (SciVideoBench's `post_prompt_cot`) is not asked. Read
    from the YAML and utils.py, never run."""
    sources = [(_function_source(yaml_path, reference), reference)
               for reference in (_reference(config, key) for key in PROMPT_FUNCTIONS) if reference]
    texts = []
    for source, reference in sources:
        texts.append(source)
        constants = _module_constants(yaml_path, reference)
        texts += [text for name, text in constants.items() if re.search(rf"\b{re.escape(name)}\b", source)]
    for key, value in _prompt_kwargs(config).items():
        named = any(re.search(rf"[\"']{re.escape(str(key))}[\"']", source) for source, _ in sources)
        if named or (not sources and key in ("pre_prompt", "post_prompt")):
            texts += _texts(value)
    return any(_REASONING_REQUEST.search(text) for text in texts)


def classify(task: str, path: Path) -> UpstreamStatus | None:
    """The task's status, from its YAML alone; None where it is no video task (or a YAML lmms-eval cannot read)."""
    from lmms_eval.utils import load_yaml_config

    from lmms_eval_tasks.upstream.config import tasks_root

    try:
        config = load_yaml_config(str(path), mode="simple")
    except Exception:  # noqa: BLE001 - a YAML lmms-eval itself cannot read is no task of ours
        return None
    if not is_video_task(config, path):
        return None
    try:
        benchmark = path.relative_to(tasks_root()).parts[0]
    except ValueError:
        benchmark = path.parent.name
    if benchmark in IMAGE_BENCHMARKS:
        return None
    return UpstreamStatus(task, benchmark, status(task, benchmark, asks_for_reasoning(config, path)))


@functools.lru_cache(maxsize=1)
def list_upstream() -> list[UpstreamStatus]:
    """Every video task of the installed lmms-eval (its task index), sorted by benchmark and task, with its status."""
    from loguru import logger

    from lmms_eval_tasks.upstream.config import task_index

    logger.disable("lmms_eval")
    try:
        found = [classify(task, Path(entry["yaml_path"])) for task, entry in task_index().items()
                 if entry.get("type") == "task" and isinstance(entry.get("yaml_path"), str)]
    finally:
        logger.enable("lmms_eval")
    return sorted((s for s in found if s is not None), key=lambda s: (s.benchmark.lower(), s.task.lower()))
