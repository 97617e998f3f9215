"""Dispatch `python -m bench <name> [args]` to bench.<name>.main(argv)."""

from __future__ import annotations

import importlib
import sys

BENCHES = {
    "placement": "bench.placement",
    "quality": "bench.quality",
    "http": "bench.http",
    "scheduler": "bench.scheduler",
    "nudge": "bench.nudge",
    "versus": "bench.versus",
    "soak": "bench.soak",
    "memory": "bench.memory",
    "scale": "bench.scale",
    "names": "bench.names",
    "jobset": "bench.jobset",
    "schedmem": "bench.schedmem",
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in BENCHES:
        print(f"usage: python -m bench {{{'|'.join(BENCHES)}}} [args...]", file=sys.stderr)
        return 2
    name, rest = argv[0], argv[1:]
    try:
        module = importlib.import_module(BENCHES[name])
    except ModuleNotFoundError as exc:
        if exc.name != BENCHES[name]:
            raise
        print(
            f"bench {name!r} is not available: {BENCHES[name].replace('.', '/')}.py does not exist yet",
            file=sys.stderr,
        )
        return 2
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
