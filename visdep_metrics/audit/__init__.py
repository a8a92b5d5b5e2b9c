"""The audit: lmms-eval runs -> Blind Gap, Visual Gain, T, V, S, filters, sweeps, report, grounded tasks."""
