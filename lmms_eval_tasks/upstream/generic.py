"""The generic path from an upstream document to a `Question`: render, then parse, then cross-check.

1. Render: the task's own `doc_to_text` with its pre and post prompts blanked (`UpstreamTask.specific_kwargs`).
2. Parse: the last run of lettered option lines (`A. x`, `A) x`, `(A) x`, `A: x`; letters in order from A), and
   the text above them as the stem, without the instruction lines a task wraps every question in ("Select the best
   answer...", "Options:", media placeholders).
3. Cross-check: the parsed options (or those the task's `doc_to_choice` gives, for lmms-eval's own multiple-choice
   tasks) must equal, text for text, the options a field of the document holds (a list,
   with or without letters; a letter -> text mapping; columns `a0..a4`, `option0..4`, `A..E`; a list written as
   text). A prompt that cut an option at a newline, or lettered something else, fails here: the record is
   unusable with its reason, never guessed.
4. The gold: the task's `doc_to_target` (a field, a template or a function), a letter, a 0-based index or an
   option's text, normalised to an index.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lmms_eval_tasks.records import LETTERS, RecordError, answer_text
from lmms_eval_tasks.upstream.config import UpstreamTask, offline

_OPTION_LINE = re.compile(r"^\s*(?:\(([A-Z])\)|([A-Z])\s*[.):：])\s*(.*?)\s*$")
_LETTER_PREFIX = re.compile(r"^\s*(?:\(([A-Z])\)|([A-Z])\s*[.):：])\s*", re.S)
_MEDIA_TOKEN = re.compile(r"<\s*(?:image|video|audio|media)(?:_\d+)?\s*>", re.I)
# Instruction lines: what the task says about answering, not what it asks.
_INSTRUCTION = re.compile(
    r"\b(select|choose|pick|respond|reply|answer)\b.*\b(options?|letters?|choices?|alternatives?)\b"
    r"|multiple[- ]choice|^\s*(questions?|options?|choices?|candidates?|answer)\s*[:：]?\s*$"
    r"|^\s*(these are|here are|the following are)\b.*\b(frames?|video|images?)\b", re.I)
_LABEL = re.compile(r"^\s*(question|q)\s*[:：]\s*", re.I)
PADDING = ("", "N/A", "n/a", "None")


def normal_text(text: Any) -> str:
    """Text as compared: whitespace runs as one space, stripped."""
    return " ".join(str(text).split())


def render(task: UpstreamTask, doc: dict) -> str:
    """The task's prompt text for `doc` with its pre/post prompts blanked; RecordError where it is no text."""
    from lmms_eval.utils import apply_template

    doc_to_text = task.config.get("doc_to_text")
    kwargs = task.specific_kwargs()
    try:
        if callable(doc_to_text):
            with offline():
                text = doc_to_text(doc, kwargs) if kwargs is not None else doc_to_text(doc)
        elif isinstance(doc_to_text, str):
            text = doc[doc_to_text] if doc_to_text in doc else apply_template(doc_to_text, doc)
        else:
            raise RecordError("the task has no doc_to_text", repr(doc_to_text))
    except RecordError:
        raise
    except (Exception, SystemExit) as e:  # noqa: BLE001 - upstream code
        raise RecordError("the upstream doc_to_text fails on the record", f"{type(e).__name__}: {e}"[:300]) from None
    if not isinstance(text, str):
        raise RecordError("the upstream doc_to_text returns no text", type(text).__name__)
    return text


def parse(text: str) -> tuple[list[str], list[str]]:
    """(the lines above the options, the options) of a rendered prompt. RecordError where no run of two or more
    lettered lines is found."""
    lines = text.splitlines()
    runs, current = [], []
    for i, line in enumerate(lines):
        match = _OPTION_LINE.match(line)
        letter = match and (match.group(1) or match.group(2))
        if match and len(current) < len(LETTERS) and letter == LETTERS[len(current)]:
            current.append((i, match.group(3)))
        else:
            if len(current) >= 2:
                runs.append(current)
            current = [(i, match.group(3))] if match and letter == "A" else []
    if len(current) >= 2:
        runs.append(current)
    if not runs:
        raise RecordError("no lettered option lines in the prompt", text[:200])
    run = runs[-1]
    above = [_MEDIA_TOKEN.sub("", line).strip() for line in lines[: run[0][0]]]
    return [line for line in above if line], [o for _, o in run]


def _instruction(line: str, constant: frozenset[str]) -> bool:
    """A line the task wraps every question in: the same above most documents' options, or an instruction."""
    return normal_text(line) in constant or bool(_INSTRUCTION.search(line))


def stem(above: list[str], doc: Mapping, options: list[str], constant: frozenset[str] = frozenset()) -> str:
    """The question of the lines above the options. Where a text field of the document is there (the longest one),
    the stem is that field, and every other line must be an instruction: a prompt that also carries other text
    (subtitles, a caption, a summary of the video) would leak it into a blind run, and is refused. Where none is, the
    stem is the lines that are no instruction."""
    block = normal_text(" ".join(above))
    option_texts = {normal_text(o) for o in options}
    anchors = sorted((str(v).strip() for v in doc.values() if isinstance(v, str) and normal_text(v)
                      and normal_text(v) not in option_texts and normal_text(v) in block), key=len, reverse=True)
    if anchors:
        anchor = normal_text(anchors[0])
        rest = [line for line in above if normal_text(line) not in anchor]
        rest = [normal_text(line).replace(anchor, "").strip() if anchor in normal_text(line) else line for line in rest]
        extra = [line for line in rest if line and not _instruction(line, constant) and not _LABEL.fullmatch(line)]
        if extra:
            raise RecordError("the prompt carries text beyond the question and the task's instructions (a blind "
                              "twin would show it)", repr(extra[0][:200]))
        return anchors[0]
    kept = [line for line in above if not _instruction(line, constant)]
    return _LABEL.sub("", "\n".join(kept).strip(), count=1).strip()


def constant_lines(blocks: list[list[str]]) -> frozenset[str]:
    """The lines above the options of more than half of two or more documents: the task's own text."""
    if len(blocks) < 2:
        return frozenset()
    counts: dict[str, int] = {}
    for block in blocks:
        for line in {normal_text(line) for line in block}:
            counts[line] = counts.get(line, 0) + 1
    return frozenset(line for line, n in counts.items() if n * 2 > len(blocks))


def without_letter(value: Any, position: int) -> str:
    """An option as a document stores it, without the letter it may carry ('A. x' at position 0 -> 'x'). Alone it
    cannot tell 'A. x' from an option that starts with its own letter ('A.C. Milan' at A): read a field's options
    with `without_letters`, which looks at all of them."""
    text = str(value)
    match = _LETTER_PREFIX.match(text)
    if match and (match.group(1) or match.group(2)) == LETTERS[position]:
        return text[match.end():]
    return text


def _carries_its_letter(value: Any, position: int) -> bool:
    match = _LETTER_PREFIX.match(str(value))
    return bool(match) and (match.group(1) or match.group(2)) == LETTERS[position]


def without_letters(values: Sequence[Any]) -> list[str]:
    """A field's options as texts, without the letters they carry where every one carries its own ('A. x', 'B. y');
    else as they are. A field either letters its options or does not: 'A.C. Milan' at A beside 'Juventus' at B is
    an option that starts with its own letter, and stays whole. Padding after the options ('', 'N/A') carries none."""
    texts = [str(v) for v in values]
    real = len(texts)
    while real > 2 and normal_text(texts[real - 1]) in PADDING:
        real -= 1
    if real <= len(LETTERS) and all(_carries_its_letter(t, k) for k, t in enumerate(texts[:real])):
        return [without_letter(t, k) for k, t in enumerate(texts[:real])] + texts[real:]
    return texts


def _lettered_lines(text: str) -> list | None:
    """The options of a text that is nothing but lettered lines ('A. x\nB. y'), else None."""
    lines = [line for line in text.splitlines() if line.strip()]
    matches = [_OPTION_LINE.match(line) for line in lines]
    if len(lines) < 2 or not all(matches):
        return None
    if [m.group(1) or m.group(2) for m in matches] != list(LETTERS[: len(lines)]):
        return None
    return [m.group(3) for m in matches]


def _option_text(value: Any) -> Any:
    """An option a record holds as {label, text} or {modality, input}: its text (other values as they are)."""
    if isinstance(value, Mapping):
        for key in ("text", "input"):
            if isinstance(value.get(key), str):
                return value[key]
    return value


def _as_list(value: Any) -> list | None:
    """The options a value holds: a list of texts, of {label, text} records, a letter -> text mapping, a mapping of
    numbered keys (option_0, option_1...), a list or mapping written as text, or lettered lines as one text."""
    if isinstance(value, str):
        if value.strip()[:1] not in ("[", "{"):
            return _lettered_lines(value)
        try:
            value = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
    if isinstance(value, Mapping):
        keys = [str(k).strip() for k in value]
        if keys and [k.upper() for k in keys] == list(LETTERS[: len(keys)]):
            return [_option_text(v) for v in value.values()]
        numbers = [re.search(r"(\d+)$", k) for k in keys]
        if len(keys) >= 2 and all(numbers):
            order = [int(n.group(1)) for n in numbers]
            if sorted(order) in (list(range(len(keys))), list(range(1, len(keys) + 1))):
                return [v for _, v in sorted(zip(order, value.values(), strict=True))]
        return None
    if isinstance(value, (list, tuple)) and len(value) >= 2:
        if all(isinstance(v, Mapping) for v in value):
            texts = [_option_text(v) for v in value]
            return None if any(isinstance(v, Mapping) for v in texts) else texts
        if all(isinstance(v, (str, int, float)) for v in value):
            return list(value)
    return None


def option_fields(doc: Mapping) -> dict[str, list]:
    """Every way the document may hold a list of options: {field or column family: values}."""
    found = {}
    for key, value in doc.items():
        listed = _as_list(value)
        if listed is not None:
            found[str(key)] = listed
    families: dict[str, dict[int, Any]] = {}
    for key, value in doc.items():
        match = re.fullmatch(r"(.*?)(\d)", str(key))
        if match and isinstance(value, (str, int, float)) and value is not None:
            families.setdefault(match.group(1), {})[int(match.group(2))] = value
    for prefix, members in families.items():
        for start in (0, 1):
            run = []
            while start + len(run) in members:
                run.append(members[start + len(run)])
            if len(run) >= 2:
                found[f"{prefix}{start}..{start + len(run) - 1}"] = run
                break
    letters = [doc[c] for c in LETTERS if c in doc]
    if len(letters) >= 2 and all(c in doc for c in LETTERS[: len(letters)]):
        found["A.."] = letters
    return found


def cross_check(options: list[str], doc: Mapping, source: str = "parsed from the prompt") -> str:
    """The field whose options `options` are (those parsed from the prompt, or those the task's `doc_to_choice`
    gives); RecordError where none holds them. A field's options are compared as they are and without the letters
    they all carry (`without_letters`), whitespace aside."""
    parsed = [normal_text(o) for o in options]
    fields = option_fields(doc)
    for name, values in fields.items():
        for texts in ([normal_text(v) for v in values], [normal_text(v) for v in without_letters(values)]):
            while texts and texts[-1] in PADDING and len(texts) > len(parsed):
                texts.pop()
            if texts == parsed:
                return name
    raise RecordError(f"the options {source} are not those of any field of the document",
                      f"options {options!r}; fields {sorted(fields) or 'none with a list of options'}"[:300])


def target(task: UpstreamTask, doc: dict) -> Any:
    """The task's `doc_to_target` for `doc`, as lmms-eval computes it (api/task.py)."""
    from lmms_eval.utils import apply_template

    doc_to_target = task.config.get("doc_to_target")
    try:
        if isinstance(doc_to_target, (int, list)) and not isinstance(doc_to_target, bool):
            return doc_to_target
        if isinstance(doc_to_target, str):
            return doc[doc_to_target] if doc_to_target in doc else apply_template(doc_to_target, doc)
        if callable(doc_to_target):
            with offline():
                return doc_to_target(doc)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - upstream code
        raise RecordError("the upstream doc_to_target fails on the record", f"{type(e).__name__}: {e}"[:300]) \
            from None
    raise RecordError("the task has no doc_to_target", repr(doc_to_target))


def gold_index(value: Any, options: list[str]) -> int:
    """The answer's position: a letter ('B', '(B)', 'B.'), an option's text (or 'B. text'), or a 0-based index."""
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise RecordError("several correct answers", repr(value))
        value = value[0]
    if isinstance(value, bool) or value is None:
        raise RecordError("the answer is no letter, index or option text", repr(value))
    if isinstance(value, int) or (isinstance(value, float) and value == int(value)):
        index = int(value)
        if not 0 <= index < len(options):
            raise RecordError("the answer index is outside the options", f"{value!r} of {len(options)} options")
        return index
    text = str(value).strip()
    letter = re.fullmatch(r"\(?([A-Za-z])\)?[.):]?", text)
    if letter and letter.group(1).upper() in LETTERS[: len(options)]:
        return LETTERS.index(letter.group(1).upper())
    lettered = _LETTER_PREFIX.match(text)
    if lettered:
        index = LETTERS.index(lettered.group(1) or lettered.group(2))
        if index < len(options) and normal_text(text[lettered.end():]) == normal_text(options[index]):
            return index
    return answer_text(text, options)


Converter = Callable[[UpstreamTask, dict], tuple[str, list[str], int]]


class GenericPath:
    """The generic path over one task's documents: (stem, options, gold index) of each, by render, parse,
    cross-check. The task's constant lines are found over all its documents first."""

    name = "generic"
    keep = None

    def __init__(self, task: UpstreamTask, docs: list[dict]):
        blocks = []
        for doc in docs:
            try:
                text = render(task, doc)
                blocks.append([line for line in text.splitlines() if line.strip()]
                              if task.config.get("doc_to_choice") is not None else parse(text)[0])
            except RecordError:
                continue
        self.constant = constant_lines(blocks)

    def convert(self, task: UpstreamTask, doc: dict) -> tuple[str, list[str], int]:
        if task.config.get("doc_to_choice") is not None:  # lmms-eval's own multiple_choice: it lists the options
            options = [str(c) for c in choices(task, doc)]
            # checked like rendered ones: a doc_to_choice that cuts an option ('A. $3.50'.split('.')[1] is ' $3',
            # worldqa's and egoschema's) gives options no field of the document holds
            cross_check(options, doc, source="the upstream doc_to_choice gives")
            above = [line for line in render(task, doc).splitlines() if line.strip()]
            return stem(above, doc, options, self.constant), options, gold_index(target(task, doc), options)
        above, options = parse(render(task, doc))
        cross_check(options, doc)
        return stem(above, doc, options, self.constant), options, gold_index(target(task, doc), options)


def choices(task: UpstreamTask, doc: dict) -> list:
    """The task's `doc_to_choice` for `doc` (a function, a field, a template or a list), as lmms-eval reads it."""
    from lmms_eval.utils import apply_template

    doc_to_choice = task.config.get("doc_to_choice")
    try:
        if callable(doc_to_choice):
            value = doc_to_choice(doc)
        elif isinstance(doc_to_choice, str):
            value = doc[doc_to_choice] if doc_to_choice in doc else ast.literal_eval(apply_template(doc_to_choice, doc))
        else:
            value = doc_to_choice
    except (Exception, SystemExit) as e:  # noqa: BLE001 - upstream code
        raise RecordError("the upstream doc_to_choice fails on the record", f"{type(e).__name__}: {e}"[:300]) \
            from None
    if isinstance(value, Mapping):
        value = list(value.values())
    if not isinstance(value, (list, tuple)):
        raise RecordError("the upstream doc_to_choice gives no list of options", repr(value)[:200])
    return list(value)
