"""Every bench starts: `python -m bench NAME --help` imports it and builds its parser, so a bench that
no test runs in full cannot rot unseen (versus once crashed as it started the service). The benches
that need a control plane run their --quick form in the e2e tier (tests/e2e/test_e2e_bench.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.__main__ import BENCHES


@pytest.mark.parametrize("name", sorted(BENCHES))
def test_every_bench_imports_and_explains_itself(name: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", name, "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: python -m bench {name}"), done.stdout[:200]


def test_an_unknown_bench_is_refused_with_the_list() -> None:
    done = subprocess.run([sys.executable, "-m", "bench", "nope"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "usage: python -m bench {" in done.stderr and "versus" in done.stderr
