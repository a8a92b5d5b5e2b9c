"""What the twin tests share: sources a test opened (specs, twins) are forgotten after it."""

import pytest

from lmms_eval_tasks import loaders, spec_data


@pytest.fixture(autouse=True)
def isolated_sources():
    saved, saved_specs = dict(loaders._OPENED), dict(spec_data._REGISTERED)
    yield
    for registry, before in ((loaders._OPENED, saved), (spec_data._REGISTERED, saved_specs)):
        registry.clear()
        registry.update(before)
