"""`python -m bench scale`: its arguments, its lazily made cluster, and the JSON and PNG it writes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from bench import memory, scale
from bench.scale import PARTS, live_cluster, parse_args, write_report


def filter_case(p50_ms: float, null_p50_ms: float) -> dict[str, float]:
    return {
        "p50_ms": p50_ms,
        "p90_ms": p50_ms * 1.3,
        "n": 40,
        "ratio_to_null_p50": round(p50_ms / null_p50_ms, 2),
        "server_cpu_ms_per_call": p50_ms / 2,
    }


def fake_result(*, with_memory: bool = True, filter_failed_at_largest: bool = False) -> dict:
    sizes = []
    for nodes, null in ((300, 0.4), (1000, 0.5)):
        size = {
            "nodes": nodes,
            "filter": {
                case: filter_case(null * k, null)
                for case, k in (
                    ("null", 1),
                    ("plain", 1.1),
                    ("plain-shuffled", 2),
                    ("gang-plan", 3),
                    ("gang-planned", 0.8),
                    ("gang-all", 0.9),
                )
            },
            "plan_ms": {str(g): {"ms": 0.1, "placed": True, "repeats": 15} for g in (8, 256, 4096)},
        }
        if with_memory:
            size["memory"] = {
                "source": "live",
                "nodes": nodes,
                "pods": nodes * 10,
                "ready_s": 3.0,
                "sync_s": 1.0,
                "cpu_s": 2.5,
                "rss_mib": 210.0 + nodes / 10,
                "peak_mib": 220.0 + nodes / 10,
                "listed_mib": nodes / 100,
            }
        sizes.append(size)
    if filter_failed_at_largest:
        del sizes[-1]["filter"]
        sizes[-1]["errors"] = {"filter": "RuntimeError: filter answered 500"}
    return {"bench": "scale", "command": "python -m bench scale --quick", "pods_per_node": 10, "sizes": sizes}


@pytest.mark.parametrize(
    "result",
    [fake_result(), fake_result(with_memory=False), fake_result(filter_failed_at_largest=True)],
    ids=["all parts", "no memory part", "a part failed"],
)
def test_the_json_and_the_png_are_written_from_a_result(tmp_path: Path, result: dict) -> None:
    png, js = tmp_path / "out" / "scale.png", tmp_path / "out" / "scale.json"
    write_report(result, png, js)
    assert orjson.loads(js.read_bytes()) == result
    data = png.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width > height > 300  # two panels side by side


ARGS = [
    # (argv, expected subset of the settings)
    (["--quick"], {"nodes": (1000, 2000), "parts": PARTS, "gangs": 5, "rounds": 40, "pods_per_node": 10}),
    ([], {"nodes": (1000, 5000, 15000, 50000), "gangs": 60, "rounds": 300}),
    (
        ["--quick", "--nodes", "2000,500", "--parts", "memory", "--pods-per-node", "3"],
        {"nodes": (500, 2000), "parts": ("memory",), "pods_per_node": 3},
    ),
    (["--out", "x/y.png"], {"png_path": Path("x/y.png"), "json_path": Path("x/y.json")}),
    (["--out", "x/y"], {"png_path": Path("x/y.png"), "json_path": Path("x/y.json")}),
    ([], {"png_path": Path("bench/scale.png"), "json_path": Path("bench/scale.json")}),
    (["--quick"], {"png_path": Path("bench/out/scale-quick.png")}),
]


@pytest.mark.parametrize(("argv", "expected"), ARGS, ids=[" ".join(a) or "defaults" for a, _ in ARGS])
def test_arguments_parse(argv: list[str], expected: dict) -> None:
    settings = parse_args(argv)
    assert {k: getattr(settings, k) for k in expected} == expected


@pytest.mark.parametrize(
    "argv", [["--nodes", "1k"], ["--nodes", "0"], ["--parts", "filter,disk"], ["--pods-per-node", "-1"]]
)
def test_bad_arguments_are_refused_with_a_message(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        parse_args(argv)
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_the_lazy_cluster_pages_as_the_listed_one() -> None:
    nodes, pods = live_cluster(7, 23)
    want_nodes, want_pods = memory.cluster_objects(7, 23)
    assert memory.list_pages("Node", nodes, 5) == memory.list_pages("Node", want_nodes, 5)  # type: ignore[arg-type]
    assert memory.list_pages("Pod", pods, 5) == memory.list_pages("Pod", want_pods, 5)  # type: ignore[arg-type]
    assert len(pods) == 23 and pods[-1] == want_pods[-1]


def test_matplotlib_is_imported_only_to_plot() -> None:
    code = "import sys, bench.scale; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def test_a_run_records_a_failed_part_and_measures_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures = {size["nodes"]: size for size in fake_result()["sizes"]}
    calls: list[tuple[str, int]] = []

    async def fake_part(settings: object, part: str, n_nodes: int) -> dict:
        calls.append((part, n_nodes))
        if (part, n_nodes) == ("filter", 300):
            raise RuntimeError("filter answered 500")
        key = {"plan": "plan_ms"}.get(part, part)
        return {key: figures[n_nodes][key]}

    monkeypatch.setattr(scale, "measure_part", fake_part)
    monkeypatch.setattr(memory, "warm_kernel_cache", lambda: None)
    settings = parse_args(["--nodes", "1000,300", "--out", str(tmp_path / "s.png")])
    result = await scale.run(settings, ["--nodes", "1000,300"])

    assert calls == [(p, n) for n in (300, 1000) for p in PARTS]
    small, large = result["sizes"]
    assert small["errors"] == {"filter": "RuntimeError: filter answered 500"}
    assert "filter" not in small and small["memory"] == figures[300]["memory"]
    assert "errors" not in large and large["filter"] == figures[1000]["filter"]
    assert orjson.loads((tmp_path / "s.json").read_bytes())["sizes"] == result["sizes"]
    assert (tmp_path / "s.png").read_bytes().startswith(b"\x89PNG")
