"""Upstream twins run offline: no hub, and HF_HOME (where upstream tasks look for videos) in a temporary folder."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def offline_hf_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.getbasetemp() / "hf_home"  # one per session: upstream utils.py read it at import
    home.mkdir(exist_ok=True)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    return home
