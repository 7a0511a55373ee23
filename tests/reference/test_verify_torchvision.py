"""--verify on the torchvision-only families, where torchvision is installed: the real image processor
rechecks the demo's rows and agrees with the formula (under `make test` these families say `not_run`)."""

from __future__ import annotations

import pytest

from tests.conftest import PROCESSORS
from tests.test_verify import FAMILY_FOLDERS, verify_on_demo
from vlmlint.models.registry import family_named

TORCHVISION_ONLY = sorted(f for f in FAMILY_FOLDERS if family_named(f).needs_torchvision)


@pytest.mark.parametrize("family", TORCHVISION_ONLY)
def test_verify_agrees_with_the_real_torchvision_class(family):
    from vlmlint.models import load_model

    assert load_model(str(PROCESSORS / FAMILY_FOLDERS[family])).exact_unavailable is None
    verify = verify_on_demo(FAMILY_FOLDERS[family])
    assert verify["rows"] > 0 and verify["disagreements"] == 0, verify
