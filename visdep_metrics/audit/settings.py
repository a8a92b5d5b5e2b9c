"""The audit's settings, once the runs are read and the panel resolved, and the one check of the options they hold.

Its own module so that what computes the tables (`intervals.py`, `compute.py`) can take the settings without importing
each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lmms_eval_tasks.errors import OptionError
from visdep_metrics.audit.diagnostics import TEXTUAL_EVIDENCE
from visdep_metrics.audit.nonvisual import StressTest
from visdep_metrics.audit.panels import Panel

RUNGS = ("single", "shuffled", "reversed")  # the temporal ladder's conditions, in the order the tables show them


@dataclass(frozen=True)
class Ladder:
    """One checkpoint's rungs: the full-video model and each condition's model (None where it was not run)."""

    video: str
    max_frames: int | None
    single: str | None = None
    shuffled: str | None = None
    reversed: str | None = None

    def rungs(self) -> dict[str, str]:
        """condition -> model, for the conditions that were run."""
        return {rung: model for rung in RUNGS if (model := getattr(self, rung)) is not None}


@dataclass(frozen=True)
class AuditSettings:
    """What every benchmark's tables are computed with, once the runs are read and the panel resolved."""

    panel: Panel
    tau: float
    max_hits: int
    roles: dict[str, str]  # model -> held_out / panel_vlm / panel_llm / vlm / text_llm / frame_condition
    confidence_level: float  # of every interval; 1 − it is the α of every test
    textual_evidence: str  # a name in diagnostics.TEXTUAL_EVIDENCE: T(q)'s formula
    baseline: str | None = None  # every other model is compared with it
    stress_tests: dict[str, StressTest] = field(default_factory=dict)  # benchmark -> `visdep tst` output
    tau_order: float = 0.1  # the temporal subset keeps grounded questions with V_order(q) >= it
    ladders: list[Ladder] = field(default_factory=list)  # the checkpoints run under frame conditions

    def __post_init__(self) -> None:
        # The one place these are checked, whoever builds the settings (the command line, a library caller).
        check_settings(self.tau, self.max_hits, self.textual_evidence, self.tau_order)
        if not 0 < self.confidence_level < 1:
            raise ValueError(f"confidence_level must lie in (0, 1), got {self.confidence_level}")


def check_settings(tau: float, max_hits: int, textual_evidence: str, tau_order: float = 0.1) -> None:
    """Refuse a τ outside [0, 1) (τ >= 1 would keep every question, NaN none), a negative LLM-Inspector hit count,
    a T(q) formula that `diagnostics.TEXTUAL_EVIDENCE` does not name, or a τ_order outside (0, 1] (V_order(q) >= 0
    would keep questions the order does not help, and V_order is at most K / (K - 1))."""
    if not 0 <= tau < 1:  # also false for NaN
        raise OptionError(f"--tau {tau!r}: must lie in [0, 1) (S(q) <= tau keeps a question; S is at most 1)")
    if isinstance(max_hits, bool) or int(max_hits) != max_hits or max_hits < 0:
        raise OptionError(f"--max-hits {max_hits!r}: must be a whole number >= 0")
    if textual_evidence not in TEXTUAL_EVIDENCE:
        raise OptionError(f"--textual-evidence {textual_evidence!r}: unknown; known: {', '.join(TEXTUAL_EVIDENCE)}")
    if not 0 < tau_order <= 1:
        raise OptionError(f"--tau-order {tau_order!r}: must lie in (0, 1] (V_order(q) >= tau_order keeps a grounded "
                          f"question in the temporal subset)")
