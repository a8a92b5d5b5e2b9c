"""The vocabulary of the adapters' model arguments: how one is declared (`Argument`, in each engine's spec), read
and written one way, and which of a run's settings change a score.

One definition for the adapters (which take the arguments) and for the audit (which tells runs apart by them), so
that a run with default arguments and one that writes a default out (`max_frames=16`, `dtype=auto`) are one model.
It imports nothing heavy: the audit reads it without torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lmms_eval_tasks.errors import VisdepError

DEFAULT_MAX_FRAMES = 16
# MM-AU's frame folders carry no frame rate: 30 fps, the rate the dataset authors' own code uses for them
# (model_adapters.frames explains where it comes from).
DEFAULT_FRAME_FOLDER_FPS = 30.0
DEFAULT_DTYPE = "auto"
# The temporal ladder's conditions (docs/ladder.md): which frames are shown and in what order.
UNIFORM_FRAMES, MIDDLE_FRAME = "uniform", "middle"
FRAME_SAMPLINGS = (UNIFORM_FRAMES, MIDDLE_FRAME)
ORIGINAL_ORDER = "original"
FRAME_ORDERS = (ORIGINAL_ORDER, "shuffled", "reversed")
LADDER_SETTINGS = ("max_frames", "frames", "frame_order")  # what the rungs of one checkpoint's ladder differ in


def condition_of(settings: Mapping[str, str]) -> str:
    """Which rung of the temporal ladder a model's settings are: "single" (`frames=middle`), "shuffled" or "reversed"
    (`frame_order`), or "video" (the frames as sampled, and any model without frames)."""
    if settings.get("frames") == MIDDLE_FRAME:
        return "single"
    order = settings.get("frame_order", ORIGINAL_ORDER)
    return "video" if order == ORIGINAL_ORDER else str(order)



@dataclass(frozen=True)
class Argument:
    """One model_arg of an engine (`model_adapters.engines`): what it is read as, its default (filled in when it is
    not given; None: left out) and whether it changes a score (then it is in the run's settings, the audit's model
    key and the durable store's key: `registry.score_settings`)."""

    name: str
    kind: type = str  # str, int, float or bool
    default: object = None
    changes_scores: bool = True
    choices: tuple[str, ...] = ()  # a str argument's values (read lowercased)


# The score-changing arguments of every engine that shows a model frames (docs/ladder.md for the last two)
FRAME_ARGUMENTS = (Argument("max_frames", int, DEFAULT_MAX_FRAMES), Argument("frame_folder_fps", float,
                                                                          DEFAULT_FRAME_FOLDER_FPS),
                   Argument("frames", str, UNIFORM_FRAMES, choices=FRAME_SAMPLINGS),
                   Argument("frame_order", str, ORIGINAL_ORDER, choices=FRAME_ORDERS))
DTYPES = ("auto", "float32", "float16", "bfloat16")
DTYPE_ARGUMENT = Argument("dtype", str, DEFAULT_DTYPE, choices=DTYPES)
# Arguments the adapter itself reads, whatever the engine (lmms-eval passes the last two)
BATCH_ARGUMENTS = (Argument("batch_size", str, changes_scores=False),
                   Argument("max_batch_size", str, changes_scores=False))

# Yes/no loader arguments that choose what is loaded: `trust_remote_code` the modeling code (a folder's own class
# or transformers'), `use_safetensors` the weight file where a folder holds both. Written "true"/"false"; the
# loader's default (LOADER_DEFAULTS) is the same model as not giving the argument.
_BOOLEAN = frozenset({"trust_remote_code", "use_safetensors"})
LOADER_DEFAULTS = {"trust_remote_code": "false"}
_TRUE, _FALSE = frozenset({"true", "1", "yes"}), frozenset({"false", "0", "no"})

_INTEGER = frozenset({"max_frames"})
_REAL = frozenset({"frame_folder_fps"})
_LOWER = frozenset({"dtype", "frames", "frame_order"})


def canonical_value(name: str, value: object) -> str:
    """An argument's value as one text whatever way it was written: 16, "16" and "16.0" -> "16" for max_frames;
    30, "30.0" -> "30" for frame_folder_fps (the shortest form of the number); True, "True", "1" -> "true" for
    trust_remote_code and use_safetensors; anything else as str(), stripped."""
    text = str(value).strip()
    if name in _BOOLEAN and text.lower() in _TRUE | _FALSE:
        return "true" if text.lower() in _TRUE else "false"
    try:
        if name in _INTEGER:
            number = float(text)
            return str(int(number)) if number == int(number) else text
        if name in _REAL:
            return format(float(text), "g")
    except ValueError:
        return text
    return text.lower() if name in _LOWER else text


def read_value(adapter: str, argument: Argument, value: object) -> object:
    """A model_arg's value (as lmms-eval passes it: text, or a number or yes/no it converted) read as its type; one
    that cannot be is a `VisdepError` naming the adapter and the argument."""
    text = str(value).strip()
    kind = argument.kind
    try:
        if kind is bool:
            if text.lower() not in _TRUE | _FALSE:
                raise ValueError
            return text.lower() in _TRUE
        if kind is int:
            number = float(text)
            if number != int(number):
                raise ValueError
            return int(number)
        if kind is float:
            return float(text)
    except ValueError:
        names = {bool: "true or false", int: "an integer", float: "a number"}
        raise VisdepError(f"{adapter}: {argument.name} must be {names[kind]}, got {value!r}") from None
    if argument.choices:
        if text.lower() not in argument.choices:
            raise VisdepError(f"{adapter}: {argument.name} must be one of {', '.join(argument.choices)}, got {value!r}")
        return text.lower()
    return text


def canonical_text(argument: Argument, value: object) -> str:
    """A value as one text by its argument's type: 2, "2" and "2.0" -> "2" for a number, "True" and "1" -> "true"
    for a yes/no, lowercased for a choice; a value that cannot be read as the type is kept as written."""
    try:
        typed = read_value("", argument, value)
    except VisdepError:
        return str(value).strip()
    if isinstance(typed, bool):
        return "true" if typed else "false"
    return format(typed, "g") if isinstance(typed, float) else str(typed)


def settings_of(defaults: Mapping[str, object], not_score_changing: frozenset[str] | set[str],
                model_args: Mapping[str, object], spec: Mapping[str, Argument] | None = None) -> dict[str, str]:
    """The score-changing settings of a run besides its checkpoint, defaults filled in, values canonical: every
    model_arg but `pretrained` and `not_score_changing`, plus `defaults` for those not given, less those set to the
    loader's default (`trust_remote_code=False`), and `max_frames` and `frame_order` where `frames=middle` (one frame
    whatever the budget, in any order). Values are written by their argument's type where `spec` has it
    (`canonical_text`), else by name (`canonical_value`). `registry.score_settings` gives an adapter's from its
    engine's spec."""
    spec = spec or {}

    def text(name: str, value: object) -> str:
        return canonical_text(spec[name], value) if name in spec else canonical_value(name, value)

    settings = {name: text(name, value) for name, value in defaults.items()}
    settings |= {name: text(name, value) for name, value in model_args.items()
                 if name != "pretrained" and name not in not_score_changing}
    settings = {name: value for name, value in settings.items() if LOADER_DEFAULTS.get(name) != value}
    if settings.get("frames") == MIDDLE_FRAME:
        settings.pop("max_frames", None)
        settings.pop("frame_order", None)
    return dict(sorted(settings.items()))
