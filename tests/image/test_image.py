"""The image's recipe without a docker daemon: pinned dependencies, a base image named without a registry
host, the runtime user the manifests run as, and a build context that holds what the Dockerfile copies.

Its RUN steps were run by hand without a daemon when the recipe was written (the image's paths mapped
under a scratch directory, the warm-up as uid 10001); `make image` builds it where a daemon is reachable.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]


def dockerfile() -> list[str]:
    """Instructions, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def pins() -> dict[str, str]:
    found = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and version.strip(), f"constraints.txt: {line!r} pins no exact version"
            found[canonicalize_name(name)] = version.strip()
    return found


def requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in [*project["dependencies"], *project["optional-dependencies"]["test"]]]


@pytest.mark.parametrize("req", requirements(), ids=str)
def test_every_dependency_is_pinned_within_what_pyproject_allows(req: Requirement) -> None:
    version = pins().get(canonicalize_name(req.name))
    assert version is not None, f"{req.name} is not in constraints.txt: run `make constraints`"
    assert req.specifier.contains(version, prereleases=True), (
        f"{req.name}=={version} is outside {req.specifier}"
    )


def test_installs_use_the_constraints() -> None:
    assert any(line.startswith("RUN") and "--constraint constraints.txt" in line for line in dockerfile())
    assert "--constraint constraints.txt -e '.[test]'" in (REPO / "Makefile").read_text()


def test_the_base_image_is_named_without_a_registry_host_and_can_be_overridden() -> None:
    lines = dockerfile()
    (arg,) = [line for line in lines if line.startswith("ARG BASE_IMAGE=")]
    default = arg.split("=", 1)[1]
    first = default.split("/")[0]
    assert "/" not in default or not ("." in first or ":" in first or first == "localhost"), default
    froms = [line for line in lines if line.startswith("FROM")]
    assert len(froms) == 2 and all(line.split()[1] == "${BASE_IMAGE}" for line in froms), froms


def test_the_runtime_stage_is_non_root_as_the_manifests_run_it() -> None:
    lines = dockerfile()
    runtime = lines[max(i for i, line in enumerate(lines) if line.startswith("FROM")) :]
    (user,) = [line.split()[1] for line in runtime if line.startswith("USER")]
    assert user == "10001"
    run_as = {
        int(m)
        for p in (REPO / "manifests").rglob("*.yaml")
        for m in re.findall(r"runAsUser:\s*(\d+)", p.read_text())
    }
    assert int(user) in run_as, f"the manifests run as {sorted(run_as)}, the image as {user}"
    # the kernel cache is compiled after USER, so the runtime user owns it and can lock it
    warm = next(i for i, line in enumerate(runtime) if "warm_up" in line)
    assert runtime.index(f"USER {user}") < warm


def test_the_build_context_holds_what_the_dockerfile_copies() -> None:
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    assert ignore[ignore.index("*") + 1 :], ".dockerignore starts by excluding everything, then lets files in"
    kept = {line[1:] for line in ignore if line.startswith("!")}
    copied = {
        src
        for line in dockerfile()
        if line.startswith("COPY") and "--from=" not in line
        for src in line.split()[1:-1]
    }
    assert copied <= kept, f"copied but left out of the build context: {sorted(copied - kept)}"
    assert all((REPO / name).exists() for name in kept)


def test_the_init_containers_copy_of_the_kernels_loads_without_compiling(tmp_path: Path) -> None:
    """What the image and the pod do: compile the kernels into one directory (the image's
    /opt/gang-extender/kernels), copy it with `cp -a` into another (the init container, into the emptyDir
    at NUMBA_CACHE_DIR), and a fresh process loads every kernel from the copy with no cache miss."""
    import os
    import subprocess
    import sys

    if os.environ.get("NUMBA_DISABLE_JIT") == "1":
        pytest.skip("NUMBA_DISABLE_JIT=1: nothing is compiled or cached")
    baked, copy = tmp_path / "kernels", tmp_path / "numba"
    baked.mkdir()
    copy.mkdir()
    load = (
        "from extender.placement import api, kernels; api.warm_up(); "
        "stats = [f.stats for f in vars(kernels).values() if hasattr(f, 'stats')]; "
        "print(len(stats), sum(len(s.cache_misses) for s in stats), sum(len(s.cache_hits) for s in stats))"
    )

    def run(cache: Path) -> list[int]:
        env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
        done = subprocess.run(
            [sys.executable, "-c", load], env=env, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, done.stderr
        return [int(n) for n in done.stdout.split()]

    kernels_n, misses, _ = run(baked)
    assert kernels_n > 0 and misses > 0, "the first run compiles into the baked directory"
    assert subprocess.run(["cp", "-a", f"{baked}/.", f"{copy}/"], check=False).returncode == 0
    _, misses, hits = run(copy)
    assert (misses, hits > 0) == (0, True), f"{misses} kernels compiled again, {hits} loaded from the copy"
