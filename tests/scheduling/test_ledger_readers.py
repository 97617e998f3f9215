"""The ledger is read through its methods only: no other module reaches into its collections, so
no reader can change a plan, a hold or a preemption behind the ledger's back (the one owner)."""

from __future__ import annotations

import pathlib
import re

import extender
from extender.scheduling.ledger import GangLedger
from extender.state.store import ClusterStore

ROOT = pathlib.Path(extender.__file__).parent
LEDGER = ROOT / "scheduling" / "ledger.py"


def collections_of_the_ledger() -> set[str]:
    ledger = GangLedger(ClusterStore(), wait_s=1, backoff_initial_s=1, backoff_max_s=1, clock=lambda: 0.0)
    return {name for name, value in vars(ledger).items() if isinstance(value, dict | set | list)}


def test_the_ledger_has_collections_to_guard():
    assert {"gangs", "preemptions", "assumed", "binding", "rejected"} <= collections_of_the_ledger()


def test_no_module_reads_the_ledgers_collections():
    names = "|".join(sorted(collections_of_the_ledger()))
    reach = re.compile(rf"\bledger\.({names})\b")
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in sorted(ROOT.rglob("*.py"))
        if path != LEDGER
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if reach.search(line)
    ]
    assert found == [], "read the ledger through its methods:\n" + "\n".join(found)
