"""The reference job's tests (`make test-reference`): they need torch and torchvision.

Under `make test` (no torch) every test here is skipped. Under `make test-reference` (VLMLINT_REFERENCE=1)
a missing torch or torchvision is an error, so the job can never pass by skipping its proofs.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

_MISSING = [name for name in ("torch", "torchvision") if importlib.util.find_spec(name) is None]


def pytest_collection_modifyitems(config, items):
    if not _MISSING:
        return
    if os.environ.get("VLMLINT_REFERENCE") == "1":
        raise pytest.UsageError(
            f"the reference job needs {' and '.join(_MISSING)}: run it with `make test-reference`"
        )
    here = os.path.dirname(__file__)
    skip = pytest.mark.skip(reason=f"needs {' and '.join(_MISSING)} (`make test-reference` runs these)")
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(skip)
