"""A spec's benchmark: its records read through the spec, its videos, and its place in the registry.

`register_spec(path)` reads a spec (`lmms_eval_tasks.spec`) and opens its benchmark, a question source
(`loaders.QuestionSource`) known by its name to this process (`loaders.open_source`), so that `load_benchmark`,
`resolve_video`, the video check and the subset export work on it as on a built-in one.
"""

from __future__ import annotations

import functools
import glob
import json
from pathlib import Path

from lmms_eval_tasks.errors import excerpt
from lmms_eval_tasks.evaluation import current
from lmms_eval_tasks.loaders import Benchmark, known_benchmarks, open_source
from lmms_eval_tasks.records import LETTERS, Question, RecordError, answer_letter, answer_text, as_int
from lmms_eval_tasks.roots import OutsideRootError, under_root
from lmms_eval_tasks.rows import RowsError, read_rows
from lmms_eval_tasks.shipped import config_file
from lmms_eval_tasks.spec import BenchmarkSpec, missing, read_spec, spec_error
from lmms_eval_tasks.traffic import STRAY_MARKER_KEPT, split_lettered_options, stray_marker
from lmms_eval_tasks.unusable import BenchmarkData, Unusable

# --------------------------------------------------------------------------- the annotation files
MAX_ANNOTATION_FILES = 10_000  # what one glob pattern may match


def _under(spec: BenchmarkSpec, root: Path, entry: str, path: str | Path) -> Path:
    try:
        return under_root(root, path, "an annotation file is not under the root")
    except OutsideRootError as e:
        raise spec_error(spec.path, "annotations", f"{excerpt(entry)}: {e.detail}; annotation files are named "
                                                   f"relative to the root") from None


def annotation_files(spec: BenchmarkSpec, root: Path) -> list[Path]:
    """The files (or saved-dataset folders) `annotations` names under `root`, in the spec's order. Each entry, and
    each path a pattern matches, lies under the root (`roots.under_root`); a pattern is matched inside the root only
    and may match at most MAX_ANNOTATION_FILES paths."""
    files: list[Path] = []
    for entry in spec.annotations:
        if not glob.has_magic(entry):
            target = _under(spec, root, entry, Path(entry).expanduser())
            if not target.exists():
                raise spec_error(spec.path, "annotations", f"{target}: not found")
            files.append(target)
            continue
        if Path(entry).is_absolute() or ".." in Path(entry).parts:
            raise spec_error(spec.path, "annotations", f"{excerpt(entry)}: a pattern is matched inside the root "
                                                       f"{root}; write it relative to the root, without '..'")
        found: list[Path] = []
        for match in glob.iglob(entry, root_dir=root, recursive=True):
            if len(found) == MAX_ANNOTATION_FILES:
                raise spec_error(spec.path, "annotations", f"{excerpt(entry)} matches more than "
                                                           f"{MAX_ANNOTATION_FILES:,} paths under {root}; name the "
                                                           f"annotation files more narrowly")
            found.append(_under(spec, root, entry, match))
        if not found:
            raise spec_error(spec.path, "annotations", f"{excerpt(entry)} matches no file under {root}")
        files += sorted(found)
    return files


def _rows(spec: BenchmarkSpec, path: Path):
    """(record, where) of one annotation file; a file that cannot be read names the spec key to look at."""
    try:
        yield from read_rows(path, spec.format, spec.split, spec.nesting)
    except RowsError as e:
        raise spec_error(spec.path, "annotations" if e.option == "file" else e.option, str(e)) from None


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


# --------------------------------------------------------------------------- one record
def _keyed(key: str, error: RecordError) -> RecordError:
    return RecordError(f"key {key!r}: {error.reason}", error.detail)


EXTRACT_TIMEOUT_S = 1.0  # what one pattern may take on one record: real ones take microseconds


def _extract(spec: BenchmarkSpec, record: dict) -> None:
    for source_field, pattern in spec.extract:
        key = f"extract.{source_field}"
        if source_field not in record or missing(record[source_field]):
            raise RecordError(f"key {key!r}: the record has no field {source_field!r}",
                              f"its fields: {excerpt(', '.join(map(str, record)), 200)}")
        try:
            match = pattern.search(str(record[source_field]), timeout=EXTRACT_TIMEOUT_S)
        except TimeoutError:
            raise spec_error(spec.path, key, f"{excerpt(pattern.pattern)} takes more than {EXTRACT_TIMEOUT_S:g} s on "
                                             f"one record ({excerpt(record[source_field], 40)}): a pattern that "
                                             f"backtracks without end; rewrite it") from None
        if match is None:
            raise RecordError(f"key {key!r}: {excerpt(pattern.pattern)} does not match", excerpt(record[source_field]))
        clash = [g for g in match.groupdict() if g in record]
        if clash:
            raise RecordError(f"key {key!r}: a group would overwrite the record's field of that name",
                              excerpt(clash[0]))
        record.update(match.groupdict())


def option_list(spec: BenchmarkSpec, record: dict) -> list:
    if spec.lettered:
        try:
            return split_lettered_options(str(spec.options.render(record)), spec.n_options)
        except RecordError as e:
            raise e if e.reason.startswith("key ") else _keyed("fields.options.lettered", e) from None
    if isinstance(spec.options, tuple):
        return [t.render(record) for t in spec.options]
    value = spec.options.render(record)
    if isinstance(value, str) and value.strip().startswith("["):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            pass
    if not isinstance(value, (list, tuple)):
        raise RecordError("key 'fields.options': not a list of option texts",
                          f"{spec.options.text!r} gives {value!r}")
    return list(value)


def options_and_answer(spec: BenchmarkSpec, value, raw_options: list[str | None]) -> tuple[list[str], int]:
    """The options without padding, and the answer's position among them. An index or letter names a position
    among the options as read; a text is looked for among the options left once padding is dropped."""
    kept = [k for k, o in enumerate(raw_options) if o is not None and o not in spec.drop_options]
    options = [raw_options[k] for k in kept]
    if spec.answer_is == "text":
        try:
            return options, answer_text(value, options)
        except RecordError as e:
            raise _keyed("fields.answer", e) from None
    try:
        if spec.answer_is == "letter":
            position = answer_letter(value, len(raw_options))
        else:
            position = as_int(value, "answer") - (spec.answer_is == "index1")
    except RecordError as e:
        raise _keyed("fields.answer", e) from None
    if not 0 <= position < len(raw_options):
        first = 1 if spec.answer_is == "index1" else 0
        raise RecordError("key 'fields.answer': the answer is not among the options",
                          f"answer {value!r} of {len(raw_options)} options (answer_is {spec.answer_is}: "
                          f"{first}..{len(raw_options) - 1 + first})")
    if position not in kept:
        raise RecordError("key 'fields.answer': the answer is an option that drop_options removes",
                          f"option {LETTERS[position]}, {raw_options[position]!r}")
    return options, kept.index(position)


def _optional_text(spec: BenchmarkSpec, key: str, record: dict) -> str | None:
    template = spec.fields.get(key)
    if template is None:
        return None
    value = template.render(record, optional=True)
    return None if missing(value) or not str(value).strip() else str(value).strip()


def _video_path(spec: BenchmarkSpec, record: dict, root: Path) -> str:
    """The record's video, relative to the root; refused unless it stays under the root with every link resolved
    (`roots.under_root`: no absolute path, no '..' out of it, no link out of it)."""
    video = str(spec.fields["video"].render(record)).strip()
    video = video[2:] if video.startswith("./") else video
    if not video or Path(video).is_absolute() or ".." in Path(video).parts:
        raise RecordError("key 'fields.video': not a path under the root", repr(video))
    try:
        under_root(root, video)
    except OutsideRootError as e:
        raise RecordError("key 'fields.video': not a path under the root", e.detail) from None
    return video


def _question_id(spec: BenchmarkSpec, record: dict) -> str:
    qid = str(spec.fields["question_id"].render(record)).strip()
    if not qid:
        raise RecordError("key 'fields.question_id': empty question id")
    return qid


def _spec_question(spec: BenchmarkSpec, record: dict, data: BenchmarkData, root: Path) -> Question:
    raw_options = [None if missing(o) else str(o).strip() for o in option_list(spec, record)]
    options, answer = options_and_answer(spec, spec.fields["answer"].render(record), raw_options)
    if spec.n_options is not None and len(options) != spec.n_options:
        raise RecordError("key 'n_options': another number of options than declared",
                          f"{spec.n_options} declared, the record has {len(options)}: {options!r}")
    if any(not o for o in options):
        raise RecordError("key 'fields.options': an option is empty (list empty texts in drop_options if they are "
                          "padding)", repr(options))
    question = spec.fields["question"].render(record)
    if missing(question) or not str(question).strip():
        raise RecordError("key 'fields.question': empty question")
    question = Question(question_id=_question_id(spec, record), benchmark=spec.name,
                        video=_video_path(spec, record, root), question=str(question), options=options,
                        answer_index=answer,
                        category=_optional_text(spec, "category", record),
                        source=_optional_text(spec, "source", record))
    if spec.lettered and stray_marker(question.options):
        data.note(STRAY_MARKER_KEPT, question.question_id)
    return question


def read_spec_records(spec: BenchmarkSpec, root: Path) -> BenchmarkData:
    """Every record of the spec's annotation files, each a question or unusable (the reason names the spec key)."""
    data = BenchmarkData(spec.name)
    for path in annotation_files(spec, root):
        relative = _relative(path, root)
        for index, (row, where) in enumerate(_rows(spec, path)):
            record = {**row, "_file": relative, "_index": index}
            try:
                _extract(spec, record)
            except RecordError as e:
                data.unusable.append(Unusable(where, e.reason, None, e.detail))
                continue
            try:
                qid = _question_id(spec, record)
            except RecordError:
                qid = None
            data.read(where, qid, _spec_question, spec, record, data, root)
    return data.finish("key 'fields.question_id': the question id repeats an earlier record's")


# --------------------------------------------------------------------------- videos
def find_spec_video(root: Path, video: str) -> Path:
    """root/video; a '*' in `video` matches one folder level the annotations do not name (MM-AU's group folders).
    Where no path or several match, the unmatched pattern is returned (it does not exist: the video check says
    'not found')."""
    path = root / video
    if not glob.has_magic(video):
        return path
    found = glob.glob(str(path))
    return Path(found[0]) if len(found) == 1 else path


def check_spec_videos(spec: BenchmarkSpec, root: Path) -> None:
    """Every usable question's video exists under the root (a file or folder; `*` must match exactly one path);
    raises SpecError naming fields.video, the template, the first record whose video is missing and how many are."""
    data = read_spec_records(spec, root)
    videos: dict[str, str] = {}
    for question, where in zip(data.questions, data.wheres, strict=True):
        videos.setdefault(question.video, where)
    problems = []
    for video, where in videos.items():
        if glob.has_magic(video):
            found = glob.glob(str(root / video))
        else:
            found = [root / video] if (root / video).exists() else []
        try:
            for path in found:
                under_root(root, path)
        except OutsideRootError as e:
            problems.append((video, where, f"matches a path that is not under the root: {e.detail}"))
            continue
        if len(found) != 1:
            problems.append((video, where, "matches no path" if not found else f"matches {len(found)} paths"))
    if problems:
        video, where, what = problems[0]
        raise spec_error(spec.path, "fields.video",
                         f"{len(problems)} of {len(videos)} videos {'is' if len(problems) == 1 else 'are'} not found "
                         f"under {root} with the template {spec.fields['video'].text!r}; the first: {where} -> "
                         f"{video!r} {what}")


# --------------------------------------------------------------------------- registration
def register_spec(path: str | Path) -> Benchmark:
    """Read a spec and open its benchmark (again for the same file: replaced, so an edited spec is read anew). A
    name taken by a built-in benchmark or another file's source is refused."""
    spec = read_spec(path)
    existing = known_benchmarks().get(spec.name)
    if existing is not None and existing.reference() != {"spec": str(spec.path)}:
        owner = ("a built-in visdep benchmark" if existing.reference() == {"benchmark": spec.name}
                 else f"the benchmark of {next(iter(existing.reference().values()))}")
        raise spec_error(spec.path, "name", f"{spec.name!r} is already {owner}; choose another name")
    bench = Benchmark(spec.name, spec.root_variable, f"the files {spec.path.name} names",
                      functools.partial(read_spec_records, spec), spec=spec.path, default_root=spec.root_default,
                      find_video=find_spec_video, skip_unusable=spec.skip_unusable)
    open_source(bench)
    current().specs[spec.name] = spec
    return bench


def register_specs(paths: list[str] | None) -> list[str]:
    """Register every spec of a repeatable `--spec` option (a file, or the name of a shipped example spec:
    `lmms_eval_tasks.shipped`); returns their benchmark names."""
    return [register_spec(config_file(p, "specs")).name for p in paths or []]


def registered_spec(name: str) -> BenchmarkSpec | None:
    return current().specs.get(name)
