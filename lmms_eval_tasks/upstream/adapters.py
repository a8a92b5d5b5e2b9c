"""Adapters: how to read the upstream tasks the generic path cannot, said in the spec language where it suffices.

An adapter's `fields` are a benchmark spec's field templates (docs/specs.md; parsed and applied by the spec's own
code, `lmms_eval_tasks.spec` and `spec_data`): `options` ('{options}' a list field, or one template per column),
`question`, and `answer` with `answer_is` (index, index1, letter, text). Without an `options` template the generic
path still renders, parses and cross-checks, and `answer` only replaces the task's `doc_to_target` (tomato's and
worldsense's YAMLs name their target function without `!function`, so lmms-eval renders it as literal text).
`keep` is a row filter for a benchmark that mixes multiple-choice and open questions; `category` names the question's
category where no field holds its type. Some readings need a function: options that exist only inside the question
text (`options_in_text`; TempCompass caption matching's labelled lines, `read_caption_matching`), and VITATEC's
options, ordered by a coin flip seeded inside its `doc_to_text` (reproduced by rendering it, then checked against the
caption and counterfactual).
"""

from __future__ import annotations

import fnmatch
import functools
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmms_eval_tasks.records import LETTERS, RecordError
from lmms_eval_tasks.spec import BenchmarkSpec, parse_template
from lmms_eval_tasks.spec_data import option_list, options_and_answer
from lmms_eval_tasks.upstream.config import UpstreamTask
from lmms_eval_tasks.upstream.generic import (
    cross_check,
    gold_index,
    normal_text,
    option_fields,
    parse,
    render,
    stem,
    target,
    without_letters,
)


@dataclass(frozen=True)
class Adapter:
    name: str
    tasks: tuple[str, ...]  # fnmatch patterns of the upstream task names it reads
    fields: Mapping[str, Any] = field(default_factory=dict)  # spec-language templates: question, options, answer
    answer_is: str = "letter"
    keep: Callable[[dict], bool] | None = None  # the documents that are multiple-choice questions
    read: Callable[[UpstreamTask, dict], tuple[str, list[str], int]] | None = None  # where templates do not suffice
    # where no field holds the question's type (convert.CATEGORY_FIELDS): the category as the task's own scoring
    # groups its questions
    category: Callable[[dict], str | None] | None = None

    @functools.cached_property
    def spec(self) -> BenchmarkSpec:
        """The fields as a benchmark spec, so that the spec's own code renders options and answers."""
        where = Path(__file__)
        options = self.fields.get("options", "{_no_options}")  # a spec has options; this one is never rendered
        return BenchmarkSpec(
            path=where, name=self.name, root_variable="", root_default=None, annotations=(), format=None, split=None,
            nesting=(), extract=(),
            fields={k: parse_template(v, f"fields.{k}", where) for k, v in self.fields.items() if k != "options"},
            options=tuple(parse_template(t, f"fields.options[{i}]", where) for i, t in enumerate(options))
            if isinstance(options, list) else parse_template(options, "fields.options", where),
            lettered=False, answer_is=self.answer_is, n_options=None, drop_options=frozenset({"", "N/A"}))

    def convert(self, task: UpstreamTask, doc: dict) -> tuple[str, list[str], int]:
        if self.read is not None:
            return self.read(task, doc)
        spec = self.spec
        if "options" in self.fields:  # the options from the document, as a spec reads them
            listed = option_list(spec, doc)
            texts = iter(without_letters([str(o).strip() for o in listed if o is not None]))
            raw = [None if o is None else next(texts) for o in listed]
            question = str(spec.fields["question"].render(doc))
        else:  # the generic path, the answer from a field
            above, raw = parse(render(task, doc))
            cross_check(raw, doc)
            question = stem(above, doc, raw)
        if "answer" not in spec.fields:
            options = [o for o in raw if o is not None and o not in spec.drop_options]
            return question, options, gold_index(target(task, doc), options)
        options, gold = options_and_answer(spec, spec.fields["answer"].render(doc), raw)
        return question, options, gold


def options_in_text(source: str) -> Callable[[UpstreamTask, dict], tuple[str, list[str], int]]:
    """A reader for tasks whose options exist only as lettered lines inside one text field (`source`): the lines
    above them are the question, the gold is the task's target (a letter, or 'A. text' checked against option A)."""

    def read(task: UpstreamTask, doc: dict) -> tuple[str, list[str], int]:
        above, options = parse(str(doc[source]))
        question = stem(above, {}, options)
        return question, options, gold_index(target(task, doc), options)

    return read


def two_way(options: tuple[str, str], question: str | None = None) -> Callable[[UpstreamTask, dict],
                                                                          tuple[str, list[str], int]]:
    """A reader for yes/no-style tasks with no options in their prompt: the two options given, the question a field
    (`question`) or the task's prompt, the gold the option the target names (in any case)."""

    def read(task: UpstreamTask, doc: dict) -> tuple[str, list[str], int]:
        text = str(doc[question]) if question else render(task, doc)
        answer = normal_text(target(task, doc)).lower()
        matches = [k for k, o in enumerate(options) if o.lower() == answer]
        if len(matches) != 1:
            raise RecordError("the answer is not one of the two options", f"{answer!r}, options {list(options)!r}")
        return text.strip(), list(options), matches[0]

    return read


# TempCompass caption matching (its questions/caption_matching.json, 1503 questions): the question's first line, then
# one line per option labelled `Caption A: `, `Sentence A: ` or `Option 1: ` (letters or numbers in order from the
# first); the answer is one option line as shown ('Caption B: The man is moving from left to right.'). Its own
# scoring (utils.eval_rule) splits the question at newlines and each option at ': ' the same way.
_CAPTION_OPTION = re.compile(r"^(Caption|Sentence|Option) ([A-Z]|[1-9]\d*): (.*)$")


def read_caption_matching(task: UpstreamTask, doc: dict) -> tuple[str, list[str], int]:
    """TempCompass caption matching: the question line, the labelled option lines (`Caption A: x`, `Sentence A: x`,
    `Option 1: x`), the gold the option line the target is, checked label and text."""
    lines = [line.strip() for line in str(doc["question"]).split("\n") if line.strip()]
    matches = [_CAPTION_OPTION.match(line) for line in lines]
    first = next((i for i, m in enumerate(matches) if m), None)
    if first is None or first == 0:
        raise RecordError("no question line followed by labelled option lines (Caption A:, Sentence A:, Option 1:)",
                          str(doc["question"])[:200])
    options = matches[first:]
    if len(options) < 2 or not all(options):
        raise RecordError("the lines after the first labelled option are not all labelled options",
                          str(doc["question"])[:200])
    kinds = {m.group(1) for m in options}
    labels = [m.group(2) for m in options]
    in_order = (labels == list(LETTERS[: len(labels)])) or (labels == [str(k + 1) for k in range(len(labels))])
    if len(kinds) != 1 or not in_order:
        raise RecordError("the option labels are not one kind in order (A, B... or 1, 2...)", repr(lines[first:])[:200])
    answer = normal_text(target(task, doc))
    shown = [normal_text(m.group(0)) for m in options]
    if answer not in shown:
        raise RecordError("the answer is not one of the option lines", repr(answer)[:200])
    question = " ".join(lines[:first])
    return question, [m.group(3) for m in options], shown.index(answer)


def video_mmmu_subject(doc: dict) -> str | None:
    """Video-MMMU's subject, from its id '<split>_<Subject>_<n>' ('validation_Art_Theory_1' -> 'Art_Theory'): what its
    own scoring groups by (utils.extract_subset_name). Its `question_type` says only 'multiple-choice' or 'open'."""
    match = re.fullmatch(r"[^_]+_(.+?)_\d+", str(doc.get("id", "")))
    return match.group(1) if match else None


def read_numbered_options(task: UpstreamTask, doc: dict) -> tuple[str, list[str], int]:
    """PLM-VideoBench FGQA: options in a mapping keyed option_0, option_1... (its prompt template appends a literal
    '{answer}' slot to the last one, so the prompt is not parsed), the answer an option's text."""
    options = option_fields({"options": doc["options"]}).get("options")
    if not options:
        raise RecordError("'options' is not a mapping of numbered options", repr(doc["options"])[:200])
    options = [str(o) for o in options]
    return str(doc["question"]), options, gold_index(doc["answer"], options)


def _caption_text(text: Any) -> str:
    return normal_text(text).rstrip(".").lower()


def read_vitatecs(task: UpstreamTask, doc: dict) -> tuple[str, list[str], int]:
    """VITATECS: the two options (caption, counterfactual) in the order its own doc_to_text draws (a coin flip
    seeded by their text), checked to be those two texts; the gold its doc_to_answer gives ('(A) text')."""
    above, options = parse(render(task, doc))
    if sorted(map(_caption_text, options)) != sorted(map(_caption_text, (doc["caption"], doc["counterfactual"]))):
        raise RecordError("the options parsed from the prompt are not the caption and the counterfactual",
                          f"parsed {options!r}")
    return stem(above, doc, options), options, gold_index(target(task, doc), options)


def _multiple_choice_type(doc: dict) -> bool:
    return doc.get("question_type") == "multiple-choice"


def _has_options(doc: dict) -> bool:
    return bool(doc.get("options"))


def _text_choices(doc: dict) -> bool:
    """WM-ABench's rows with text options rewritten as letters (`choices_str_letter`), not image options."""
    return bool(doc.get("choices_str_letter")) and not doc.get("image_choices")


def _spatialtree_choice(doc: dict) -> bool:
    """SpatialTree-Bench's multiple-choice rows: metric 'multichoiceeval' below level L4 (L4 is open)."""
    try:
        info = json.loads(doc.get("extra_info") or "{}")
    except json.JSONDecodeError:
        return False
    return info.get("metricfunc") == "multichoiceeval" and info.get("spatree0") != "L4"


ADAPTERS: tuple[Adapter, ...] = (
    Adapter("mc_rows", ("mmvu_val",), keep=_multiple_choice_type),
    Adapter("mc_rows", ("video_mmmu_adaptation", "video_mmmu_comprehension", "video_mmmu_perception",
                        "video_mmmu_adaptation_question_only"), keep=_multiple_choice_type,
            category=video_mmmu_subject),
    Adapter("rows_with_options", ("vsibench", "vsibench_debiased", "vsibench_pruned", "revsi_*", "osi_bench",
                                  "osi_bench_frames"), keep=_has_options),
    Adapter("options_in_question", ("tempcompass_multi_choice", "temporalbench_long_qa", "temporalbench_short_qa"),
            read=options_in_text("question")),
    Adapter("caption_matching", ("tempcompass_caption_matching",), read=read_caption_matching),
    Adapter("options_in_input", ("timescope", "longtimescope"), read=options_in_text("input")),
    Adapter("tomato", ("tomato",), {"question": "{question}", "options": "{options}", "answer": "{answer}"},
            answer_is="index"),
    Adapter("mmworld", ("mmworld",), {"question": "{question}", "options": "{options}",
                                      "answer": "{correct_answer_label}"}, answer_is="letter"),
    # its YAML's doc_to_target names a field its documents lack; its process_results scores against `gt`
    Adapter("ovobench", ("ovo_backward", "ovo_realtime"), {"question": "{question}", "options": "{options}",
                                                           "answer": "{gt}"}, answer_is="index"),
    Adapter("worldsense", ("worldsense",), {"answer": "{answer}"}, answer_is="letter"),
    Adapter("vitatecs", ("vitatecs_*",), read=read_vitatecs),
    Adapter("yes_no", ("camerabench_vqa",), read=two_way(("Yes", "No"), question="Question")),
    Adapter("possible_impossible", ("intphys2", "intphys2_debug"), read=two_way(("Possible", "Impossible"))),
    Adapter("text_choice_rows", ("wm_abench_*",), keep=_text_choices),
    Adapter("options_in_user_prompt", ("mmsi_video", "mmsi_video_sc", "mmsi_video_single_input", "mmsi_video_u50"),
            read=options_in_text("user_prompt")),
    Adapter("numbered_options", ("fgqa_test",), read=read_numbered_options),
    # its template puts 'Options : ' before the first option line; the options are the `option` list
    Adapter("spatialtree_choice_rows", ("spatialtreebench",), {"question": "{question}", "options": "{option}"},
            keep=_spatialtree_choice),
)


def adapter_for(task: str) -> Adapter | None:
    for adapter in ADAPTERS:
        if any(fnmatch.fnmatchcase(task, pattern) for pattern in adapter.tasks):
            return adapter
    return None
