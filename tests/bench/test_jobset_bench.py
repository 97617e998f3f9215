"""bench jobset schedules the whole JobSet (the release included) before it reports, and rejects bad
arguments."""

from __future__ import annotations

import pytest

from bench import jobset


def test_measure_binds_every_member_and_reports_each_call() -> None:
    row = jobset.measure(12, touch_every=3)
    assert row["released"] is True and row["bound"] == 12
    for name in ("filter", "bind", "job_change"):
        assert row[f"{name}_max_ms"] >= row[f"{name}_p50_ms"] >= 0


@pytest.mark.parametrize("argv", [["--rjs", "x"], ["--rjs", "0"], ["--touch-every", "-1"]])
def test_bad_arguments_exit_with_a_message(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        jobset.main(argv)
    assert exc.value.code == 2
    assert "--" in capsys.readouterr().err
