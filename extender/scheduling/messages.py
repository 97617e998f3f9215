"""The words: every reason and message a verb returns, built from the cache and a plan."""

from __future__ import annotations

import numpy as np

from extender.model import podaffinity, resources
from extender.model.group import GroupSpec, Source
from extender.model.keys import shown
from extender.placement import api as placement
from extender.scheduling import topology
from extender.state.store import ClusterStore


def label(group: GroupSpec) -> str:
    if group.source is Source.SINGLE_POD:
        return shown(group.key)
    return f"gang {group.key}" if group.is_gang() else f"group {group.key}"


def level_name(store: ClusterStore, level: int) -> str:
    key = store.arrays.level_key(level)
    return key.rpartition("/")[2].removeprefix("gke-")


def domain_text(store: ClusterStore, plan: placement.Plan) -> str:
    if not plan.domains:
        return ""
    level, dom = plan.domains[min(plan.domains)]
    return f"{level_name(store, level)} {store.arrays.domain_name(level, dom)}"


def unoffered_text(missing: list[str]) -> str:
    shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
    return f"no node offers {shown}"


def fenced_text(pod: str, fence_s: float, left_s: float) -> str:
    return (
        f"{pod}: not bound yet: for {fence_s:g}s after start-up this service binds nothing "
        f"({left_s:.1f}s left), so that no binding a previous instance left in flight can land on a "
        "node after this one fills it (--bind-fence-s); the scheduler will retry it"
    )


def shortfall_text(
    store: ClusterStore, rows: np.ndarray, request: np.ndarray, allowed: np.ndarray | None
) -> str:
    """Which offered node comes closest, and what it lacks."""
    arrays = store.arrays
    if allowed is not None:
        rows = rows[allowed]
    if not len(rows):
        return "no offered node is in the group's topology domain"
    short = request[None, :] - arrays.free[rows]  # >0 where a node lacks that resource
    relative = np.where(request[None, :] > 0, short / np.maximum(request[None, :], 1), 0.0)
    closest = int(np.argmin(relative.max(axis=1)))
    col = int(np.argmax(relative[closest]))
    node = store.row_names.get(int(rows[closest]), "?")
    if col >= len(store.resources.names) or short[closest, col] <= 0:
        return f"no offered node has room (closest {node})"
    name = store.resources.names[col]
    amount = resources.units_text(name, int(short[closest, col]))
    return f"no offered node has room (closest {node}: {name} short {amount})"


def no_fit_text(store: ClusterStore, group: GroupSpec, needed: int, plan: placement.Plan) -> str:
    sf = plan.shortfall
    scope = ""
    if group.topology is not None:
        keys = topology.resolve(group.topology, store)
        if keys.required:
            scope = f", {level_name(store, store.arrays.level(keys.required))}"
    head = f"gang {group.key} ({needed} pods{scope})"
    if sf is None:
        return f"{head}: does not fit"
    if sf.level >= 0 and sf.domain_id >= 0:
        domain = store.arrays.domain_name(sf.level, sf.domain_id)
        where = f"best {level_name(store, sf.level)} {domain} fits"
    else:
        where = "the offered nodes fit"
    text = f"{head}: {where} {sf.fits} of {sf.needed}"
    if 0 <= sf.resource < len(store.resources.names) and sf.short_units > 0:
        name = store.resources.names[sf.resource]
        if name == podaffinity.ONE_PER_NODE:
            text += f" (members must be on separate nodes: {sf.short_units} node(s) short)"
        else:
            text += f" ({name} short {resources.units_text(name, sf.short_units)})"
    return text
