"""The audit's explorer: `OUT/explorer.html`, one self-contained page to look at the diagnostic space, the τ
threshold, every question and the frames the models saw (docs/explorer.md)."""

from visdep_metrics.explorer.page import PAGE, write_explorer

__all__ = ["PAGE", "write_explorer"]
