"""Model panels: which models form T (text-only LLMs), which form V (VLMs), which are held out.

A panel file (YAML, see ``configs/panels/paper.yaml``) names models as they appear in ``pretrained=`` of
lmms-eval's model_args (a Hugging Face id or a local path); a checkpoint run under several score-changing
settings (two frame budgets, two dtypes) is named as the audit names it, e.g. ``org/vlm [max_frames=8]``,
or by its label::

    text_llms: [...]        # T(q): blind runs only (text-only LLMs)
    vlms: [...]             # V(q): blind and video runs; also the B-Clean panel
    held_out: [...]         # evaluation only: in no filtering decision
    inspector_llms: [...]   # optional, LLM-Inspector's panel (default: text_llms)
    inspector_max_hits: 1   # optional, LLM-Inspector drops a question if more LLMs answer it correctly
    tau: 0.1                # optional, the S(q) threshold
    tau_order: 0.1          # optional, the V_order(q) threshold of the temporal subset (docs/ladder.md)

Without a panel file every text-only model (blind runs only) forms T and every VLM forms V. A frame condition of the
temporal ladder (`frames=middle`, `frame_order=shuffled|reversed`) is no model of a panel: V(q) is the full video's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from lmms_eval_tasks.errors import VisdepError, excerpt
from lmms_eval_tasks.reading import read_yaml

DEFAULT_TAU = 0.1
DEFAULT_TAU_ORDER = 0.1
CONDITION_ROLE = "frame_condition"  # a ladder's rung (`ladder.py`): in no panel and no mean of the models
DEFAULT_MAX_HITS = 1
_LISTS = ("text_llms", "vlms", "held_out", "inspector_llms")
_KEYS = set(_LISTS) | {"tau", "tau_order", "inspector_max_hits"}


class PanelError(VisdepError):
    """A panel file or a panel that does not fit the runs; the message says what is wrong."""


@dataclass(frozen=True)
class Panel:
    text_llms: tuple[str, ...]
    vlms: tuple[str, ...]
    held_out: tuple[str, ...] = ()
    inspector_llms: tuple[str, ...] | None = None
    inspector_max_hits: int = DEFAULT_MAX_HITS
    tau: float = DEFAULT_TAU
    tau_order: float = DEFAULT_TAU_ORDER
    source: str = "inferred"  # the panel file, or "inferred" from which models have video runs

    @property
    def inspector(self) -> tuple[str, ...]:
        return self.text_llms if self.inspector_llms is None else self.inspector_llms

    @property
    def named(self) -> set[str]:
        return set(self.text_llms) | set(self.vlms) | set(self.held_out) | set(self.inspector)

    def role(self, model: str, vision_models: set[str], conditions: set[str] = frozenset()) -> str:
        """held_out / panel_vlm / panel_llm / vlm / text_llm (the last two: in no panel) / frame_condition."""
        if model in conditions:
            return CONDITION_ROLE
        if model in self.held_out:
            return "held_out"
        if model in self.vlms:
            return "panel_vlm"
        if model in self.text_llms:
            return "panel_llm"
        return "vlm" if model in vision_models else "text_llm"


def _names(data: dict, key: str, path: Path) -> tuple[str, ...] | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise PanelError(f"{path}: {key} must be a list of model names (as in pretrained=), got {excerpt(value)}")
    names = tuple(v.strip() for v in value)
    if len(set(names)) != len(names):
        raise PanelError(f"{path}: {key} names a model twice")
    return names


def load_panel(path: str | Path) -> Panel:
    """Read and check a panel file."""
    path = Path(path)
    data = read_yaml(path, "panel", error=PanelError)
    if not isinstance(data, dict):
        raise PanelError(f"{path}: a panel file is a mapping with {', '.join(_LISTS)}")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise PanelError(f"{path}: unknown key(s) {excerpt(unknown)}; allowed: {sorted(_KEYS)}")
    lists = {key: _names(data, key, path) for key in _LISTS}
    if not lists["text_llms"] and not lists["vlms"]:
        raise PanelError(f"{path}: names neither text_llms nor vlms")
    held_out = set(lists["held_out"] or ())
    in_panels = (held_out & (set(lists["text_llms"] or ()) | set(lists["vlms"] or ())
                             | set(lists["inspector_llms"] or ())))
    if in_panels:
        raise PanelError(f"{path}: held_out model(s) {excerpt(sorted(in_panels))} also sit in a panel; a held-out "
                         f"model must take part in no filtering decision")
    tau = data.get("tau", DEFAULT_TAU)
    if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not 0 <= tau < 1:
        raise PanelError(f"{path}: tau must lie in [0, 1) (S(q) <= tau keeps a question), got {tau!r}")
    tau_order = data.get("tau_order", DEFAULT_TAU_ORDER)
    if isinstance(tau_order, bool) or not isinstance(tau_order, (int, float)) or not 0 < tau_order <= 1:
        raise PanelError(f"{path}: tau_order must lie in (0, 1] (V_order(q) >= tau_order keeps a grounded question "
                         f"in the temporal subset), got {excerpt(tau_order)}")
    hits = data.get("inspector_max_hits", DEFAULT_MAX_HITS)
    if isinstance(hits, bool) or not isinstance(hits, int) or hits < 0:
        raise PanelError(f"{path}: inspector_max_hits must be a non-negative integer, got {hits!r}")
    return Panel(text_llms=lists["text_llms"] or (), vlms=lists["vlms"] or (), held_out=lists["held_out"] or (),
                 inspector_llms=lists["inspector_llms"], inspector_max_hits=hits, tau=float(tau),
                 tau_order=float(tau_order), source=str(path))


def inferred_panel(models: list[str], vision_models: set[str], conditions: set[str] = frozenset()) -> Panel:
    """The panel without a file: text-only models (blind runs only) form T, VLMs form V (frame conditions neither),
    none held out."""
    return Panel(text_llms=tuple(m for m in models if m not in vision_models),
                 vlms=tuple(m for m in models if m in vision_models and m not in conditions))


def resolve_panel(panel: Panel, models: dict) -> Panel:
    """The panel with each entry replaced by the model it names: a model's name, its label, or a checkpoint's
    `pretrained=` when the runs hold that checkpoint under one set of settings only. A checkpoint run under
    several settings (e.g. two frame budgets) must be named with its settings; entries naming no run are kept
    (check_panel refuses them). models: name -> runs.ModelInfo."""
    from visdep_metrics.audit.runs import RunDataError, resolve_model_keys

    def resolve(names):
        if names is None:
            return None
        resolved = []
        for name in names:
            try:
                (model,) = resolve_model_keys(name, models, "panel entry")
            except RunDataError as e:
                if "has no run here" in str(e):
                    model = name
                else:
                    raise PanelError(f"panel {panel.source}: {e}") from None
            resolved.append(model)
        return tuple(resolved)

    return replace(panel, text_llms=resolve(panel.text_llms), vlms=resolve(panel.vlms),
                   held_out=resolve(panel.held_out), inspector_llms=resolve(panel.inspector_llms))


def check_panel(panel: Panel, models: list[str], vision_models: set[str], conditions: set[str] = frozenset()) -> None:
    """Refuse a panel naming a model with no runs, a panel VLM without video runs, or a frame condition."""
    absent = sorted(panel.named - set(models))
    if absent:
        raise PanelError(f"panel {panel.source}: no runs of {absent}; models found: {models} (names must match "
                         f"pretrained= of model_args exactly)")
    blind_only = sorted(set(panel.vlms) - vision_models)
    if blind_only:
        raise PanelError(f"panel {panel.source}: vlms {blind_only} have only blind runs; V(q) needs their video "
                         f"runs too (list text-only models under text_llms)")
    named_conditions = sorted(panel.named & conditions)
    if named_conditions:
        raise PanelError(f"panel {panel.source}: {named_conditions} are frame conditions of the temporal ladder "
                         f"(frames=middle or frame_order=shuffled|reversed), not models: a panel names the full-video "
                         f"model of a checkpoint, and the audit finds its conditions itself (docs/ladder.md)")
