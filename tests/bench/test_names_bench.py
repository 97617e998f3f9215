"""bench names checks the kernel against decoding before it times anything, and rejects bad sizes."""

from __future__ import annotations

import pytest

from bench import names


def test_measure_reports_every_case_per_call() -> None:
    row = names.measure(40, calls=3)
    assert row["nodes"] == 40 and row["calls"] == 3
    for case in ("fingerprint", "orjson", "orjson+frozenset"):
        assert row[f"{case}_ms"] >= 0
    assert row["index_build_ms"] > 0


@pytest.mark.parametrize("argv", [["--nodes", "x"], ["--nodes", "0"], ["--calls", "0"]])
def test_bad_arguments_exit_with_a_message(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        names.main(argv)
    assert exc.value.code == 2
    assert "--" in capsys.readouterr().err
