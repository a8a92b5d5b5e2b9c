"""Upstream documents to questions: the adapter's or the generic path's (stem, options, gold), and the rest of a
`Question` from the document (its id, video, category)."""

from __future__ import annotations

from collections.abc import Sequence

from lmms_eval_tasks.records import Question
from lmms_eval_tasks.unusable import BenchmarkData
from lmms_eval_tasks.upstream.config import UpstreamTask
from lmms_eval_tasks.upstream.generic import GenericPath
from lmms_eval_tasks.upstream.video import video_identity

ID_FIELDS = ("question_id", "qid", "question_uid", "question_idx", "uid", "id", "q_id", "index", "idx", "key")
# The fields that hold a question's type, first present first: a task's category is the question's type, not the
# video's genre or domain (`type` and `domain` come last; LVBench's `type` is the video's genre, its `question_type`
# the list of question types). docs/twins.md says which field each fixture's task takes.
CATEGORY_FIELDS = ("task_type", "question_type", "question_category", "category", "sub_task", "subtask",
                   "task_name", "dimension", "dim", "type", "domain")
# Values that say a row's format, not its question's type (Video-MMMU's and MMVU's `question_type`): no category.
FORMAT_VALUES = frozenset({"multiple-choice", "multiple choice", "multiple_choice", "mcq", "open", "open-ended",
                           "open ended", "open_ended", "yes/no", "yes_no"})
SOURCE_FIELDS = ("duration", "duration_group", "video_duration_type", "source")
NOT_MULTIPLE_CHOICE = "documents the adapter's row filter leaves out (not multiple-choice)"


def where(task: UpstreamTask, index: int) -> str:
    return f"{task.name} document {index}"


def id_field(docs: Sequence[dict]) -> str | None:
    """The first of ID_FIELDS every document has, with a value unique among them; None: ids are positions."""
    for name in ID_FIELDS:
        values = [d.get(name) for d in docs]
        usable = all(isinstance(v, (str, int)) and str(v).strip() for v in values)
        if usable and len(set(map(str, values))) == len(docs):
            return name
    return None


def _first_text(doc: dict, names: Sequence[str]) -> str | None:
    for name in names:
        value = doc.get(name)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value).strip():
            return str(value).strip()
    return None


def category_field(doc: dict) -> tuple[str, str] | None:
    """(the field, the category) of the first of CATEGORY_FIELDS that holds a question type: a text, a number, or a
    list of texts (several types of one question, joined with ', ' in the document's order). A format value
    ('multiple-choice') is none."""
    for name in CATEGORY_FIELDS:
        value = doc.get(name)
        if isinstance(value, list) and value and all(isinstance(v, str) and v.strip() for v in value):
            value = ", ".join(v.strip() for v in value)
        if not isinstance(value, (str, int)) or isinstance(value, bool) or not str(value).strip():
            continue
        if str(value).strip().lower() in FORMAT_VALUES:
            continue
        return name, str(value).strip()
    return None


def category(doc: dict, adapter=None) -> str | None:
    """The question's category: the adapter's (where no field holds the type), else `category_field`'s."""
    if adapter is not None and getattr(adapter, "category", None) is not None:
        return adapter.category(doc)
    found = category_field(doc)
    return found[1] if found else None


def _question(task: UpstreamTask, doc: dict, qid: str, adapter) -> Question:
    stem, options, gold = adapter.convert(task, doc)
    video = video_identity(task, doc) or qid
    return Question(question_id=qid, benchmark=task.name, video=video, question=stem, options=options,
                    answer_index=gold, category=category(doc, adapter),
                    source=_first_text(doc, SOURCE_FIELDS))


def convert_documents(task: UpstreamTask, docs: Sequence[dict], adapter=None) -> BenchmarkData:
    """Every document as a question or an unusable record (`where`: '<task> document <i>'), in order. An adapter's
    row filter leaves documents that are no multiple-choice question out (counted in the notes)."""
    data = BenchmarkData(task.name)
    adapter = adapter if adapter is not None else GenericPath(task, list(docs))
    key = id_field(docs)
    for i, doc in enumerate(docs):
        qid = str(doc[key]) if key else str(i)
        if adapter.keep is not None and not adapter.keep(doc):
            data.note(NOT_MULTIPLE_CHOICE, qid)
            continue
        data.read(where(task, i), qid, _question, task, doc, qid, adapter)
    return data.finish()
