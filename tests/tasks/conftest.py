"""What the task tests share: sources a test opened (specs, twins) are forgotten after it."""

import pytest

from lmms_eval_tasks import loaders, spec_data


@pytest.fixture(autouse=True)
def isolated_registry():
    """Sources opened by a test leave the process's known benchmarks as they were."""
    saved = dict(loaders._OPENED)
    saved_specs = dict(spec_data._REGISTERED)
    yield
    for registry, before in ((loaders._OPENED, saved), (spec_data._REGISTERED, saved_specs)):
        registry.clear()
        registry.update(before)
