"""Building the package leaves the checkout as it was: no ``build/`` and no
``*.egg-info`` next to the sources after ``pip install ./clients/python``; and
every name the package lists imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]


def _tree() -> set:
    """Every file and folder under the package, caches aside."""
    skip = ("__pycache__", ".pytest_cache")
    return {
        path.relative_to(PACKAGE)
        for path in PACKAGE.rglob("*")
        if not any(part in skip for part in path.relative_to(PACKAGE).parts)
    }


def test_building_the_wheel_writes_nothing_into_the_checkout(tmp_path):
    before = _tree()
    # What `pip install ./clients/python` does first, without the network: the
    # build backend comes from this environment (the test extras bring it).
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
         "--no-build-isolation", "--disable-pip-version-check",
         "--wheel-dir", str(tmp_path), str(PACKAGE)],
        check=True,
    )
    assert [wheel.name for wheel in tmp_path.glob("lockbroker-*.whl")], "no wheel was built"
    left_behind = sorted(str(path) for path in _tree() - before)
    assert not left_behind, f"building left files in the checkout: {left_behind}"


def test_every_public_name_and_every_shared_part_imports():
    import lockbroker
    from lockbroker import _common

    for module in (lockbroker, _common):
        missing = [name for name in module.__all__ if not hasattr(module, name)]
        assert not missing, (module.__name__, missing)
