"""What the task tests share: specs registered by a test are forgotten after it."""

import pytest

from lmms_eval_tasks import spec_data
from lmms_eval_tasks.loaders import BENCHMARKS


@pytest.fixture(autouse=True)
def isolated_registry():
    """Specs registered by a test leave BENCHMARKS as they were."""
    saved = dict(BENCHMARKS)
    saved_specs = dict(spec_data._REGISTERED)
    yield
    for registry, before in ((BENCHMARKS, saved), (spec_data._REGISTERED, saved_specs)):
        registry.clear()
        registry.update(before)
