"""The per-node arrays the placement kernels read, and their cheap incremental upkeep.

Owns the layout only: one row per node slot, integer columns per resource, one row of dense
domain ids per topology level. It knows nothing about pods, gangs or Kubernetes objects; the
state layer translates Node and Pod events into add_row/update_row/remove_row/sub/add calls.

Layout contract (what `check()` enforces):
1. `free` and `allocatable` are int64[capacity, n_res], C-contiguous; rows >= n_rows are zero.
   `n_res` is the physical column count: it may exceed `len(resource_names)` by spare columns,
   zero everywhere and never requested, so a new resource name costs an amortised O(1) copy.
2. `schedulable` is bool[capacity]; a removed row is a free slot with schedulable False, free 0.
3. `domains` is int32[n_levels, capacity]; -1 where a row has no label for that level.
4. Arrays are replaced (not resized in place) when capacity grows or a resource is added, so
   holders must re-read the attributes after add_row/add_resource rather than keep references.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

_MIN_CAPACITY = 16


class ClusterArrays:
    """Per-node arrays the kernels read. Rows are node slots; rows are reused only via remove_row/add_row."""

    def __init__(
        self, *, resource_names: list[str], capacity: int = 1024, scarce: Iterable[str] = ()
    ) -> None:
        names = [str(n) for n in resource_names]
        if len(set(names)) != len(names):
            raise ValueError(f"resource_names: duplicate names in {names!r}; list each resource once")
        if capacity < 1:
            raise ValueError(f"capacity: must be at least 1, got {capacity}")
        capacity = max(int(capacity), _MIN_CAPACITY)
        self._resource_names = names
        self._resource_index = {n: i for i, n in enumerate(names)}
        scarce_set = set(scarce)
        self.scarce = np.array([n in scarce_set for n in names], dtype=np.bool_)
        """bool[n_res]: resources (GPUs, say) that pods not asking for them should leave alone."""
        self.n_rows = 0
        self.free = np.zeros((capacity, len(names)), dtype=np.int64)
        self.allocatable = np.zeros((capacity, len(names)), dtype=np.int64)
        self.schedulable = np.zeros(capacity, dtype=np.bool_)
        self.domains = np.full((0, capacity), -1, dtype=np.int32)
        self._labels: list[dict[str, str] | None] = []
        self._key_rows: dict[str, int] = {}  # label key -> rows that have it: `carries`
        self._free_slots: list[int] = []  # a heap, so reuse is deterministic (lowest slot first)
        self._level_keys: list[str] = []
        self._level_index: dict[str, int] = {}
        self._domain_ids: list[dict[str, int]] = []
        self._domain_names: list[list[str]] = []

    # -- shape -------------------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        return int(self.free.shape[0])

    @property
    def n_res(self) -> int:
        """Physical columns, spares included: the width of every vector the kernels read."""
        return int(self.free.shape[1])

    @property
    def resource_names(self) -> tuple[str, ...]:
        return tuple(self._resource_names)

    @property
    def n_levels(self) -> int:
        return len(self._level_keys)

    def n_domains(self, level: int) -> int:
        """How many domain ids the level has handed out (ids are never reused)."""
        return len(self._domain_names[level])

    def row_labels(self, row: int) -> Mapping[str, str]:
        labels = self._labels[row] if 0 <= row < self.n_rows else None
        if labels is None:
            raise ValueError(f"row {row} is not in use")
        return labels

    def row_in_use(self, row: int) -> bool:
        return 0 <= row < self.n_rows and self._labels[row] is not None

    # -- rows --------------------------------------------------------------------------------

    def add_row(
        self,
        *,
        allocatable: Sequence[int] | np.ndarray,
        labels: Mapping[str, str],
        schedulable: bool,
    ) -> int:
        alloc = self._as_vector(allocatable, field="allocatable")
        if self._free_slots:
            row = heapq.heappop(self._free_slots)
        else:
            if self.n_rows == self.capacity:
                self._grow(2 * self.capacity)
            row = self.n_rows
            self.n_rows += 1
            self._labels.append(None)
        self.allocatable[row] = alloc
        self.free[row] = alloc
        self.schedulable[row] = bool(schedulable)
        self._labels[row] = dict(labels)
        self._count_keys(labels, +1)
        for level in range(self.n_levels):
            self.domains[level, row] = self._domain_of(level, labels)
        return row

    def update_row(
        self,
        row: int,
        *,
        allocatable: Sequence[int] | np.ndarray | None = None,
        labels: Mapping[str, str] | None = None,
        schedulable: bool | None = None,
    ) -> bool:
        """Returns whether the row moved to another domain at some level (a label of it changed)."""
        self._require_row(row)
        moved = False
        if allocatable is not None:
            alloc = self._as_vector(allocatable, field="allocatable")
            # Pods already counted against the node stay counted: only the difference moves.
            self.free[row] += alloc - self.allocatable[row]
            self.allocatable[row] = alloc
        if labels is not None:
            self._count_keys(self._labels[row] or {}, -1)
            self._labels[row] = dict(labels)
            self._count_keys(labels, +1)
            for level in range(self.n_levels):
                domain = self._domain_of(level, labels)
                moved = moved or bool(domain != self.domains[level, row])
                self.domains[level, row] = domain
        if schedulable is not None:
            self.schedulable[row] = bool(schedulable)
        return moved

    def remove_row(self, row: int) -> None:
        self._require_row(row)
        self.free[row] = 0
        self.allocatable[row] = 0
        self.schedulable[row] = False
        self.domains[:, row] = -1
        self._count_keys(self._labels[row] or {}, -1)
        self._labels[row] = None
        heapq.heappush(self._free_slots, row)

    def _count_keys(self, labels: Mapping[str, str], step: int) -> None:
        counts = self._key_rows
        for key in labels:
            left = counts.get(key, 0) + step
            if left > 0:
                counts[key] = left
            else:
                counts.pop(key, None)

    def carries(self, label_key: str) -> bool:
        """Whether any node row has the label `label_key` (whatever its value), O(1)."""
        return label_key in self._key_rows

    def sub(self, row: int, request: np.ndarray) -> None:
        """A pod was bound or reserved on `row`: free[row] -= request."""
        self.free[row] -= request

    def add(self, row: int, request: np.ndarray) -> None:
        """A pod on `row` was released: free[row] += request."""
        self.free[row] += request

    # -- resources and levels ----------------------------------------------------------------

    def add_resource(self, name: str, *, scarce: bool = False) -> int:
        """A new column, zero everywhere; an existing name returns its column.

        Columns grow by doubling into spares, so a stream of new names (device plugins
        registering) copies the arrays O(log n) times, not once per name.
        """
        if name in self._resource_index:
            return self._resource_index[name]
        col = len(self._resource_names)
        if col >= self.n_res:
            width = max(2 * self.n_res, col + 1)
            cap = self.capacity
            for attr in ("free", "allocatable"):
                old = getattr(self, attr)
                new = np.zeros((cap, width), dtype=np.int64)
                new[:, : old.shape[1]] = old
                setattr(self, attr, new)
            scarce_flags = np.zeros(width, dtype=np.bool_)
            scarce_flags[: len(self.scarce)] = self.scarce
            self.scarce = scarce_flags
        self.scarce[col] = bool(scarce)
        self._resource_names.append(name)
        self._resource_index[name] = col
        return col

    def level(self, label_key: str) -> int:
        """The index of the topology level keyed by a node label, registered on first use."""
        found = self._level_index.get(label_key)
        if found is not None:
            return found
        index = len(self._level_keys)
        self._level_keys.append(label_key)
        self._level_index[label_key] = index
        self._domain_ids.append({})
        self._domain_names.append([])
        row_ids = np.full((1, self.capacity), -1, dtype=np.int32)
        for row in range(self.n_rows):
            labels = self._labels[row]
            if labels is not None:
                row_ids[0, row] = self._domain_of(index, labels)
        self.domains = np.ascontiguousarray(np.vstack([self.domains, row_ids]))
        return index

    def level_key(self, level: int) -> str:
        return self._level_keys[level]

    def domain_name(self, level: int, domain_id: int) -> str:
        return self._domain_names[level][domain_id]

    def domain_id(self, level: int, name: str) -> int:
        """The id of a label value at a level, -1 if no row ever carried it."""
        return self._domain_ids[level].get(name, -1)

    # -- contract ----------------------------------------------------------------------------

    def check(self) -> None:
        """Raise ValueError naming the array and the fix when the layout contract is broken."""
        cap, n_res = self.capacity, self.n_res
        for name, arr, dtype, shape in (
            ("free", self.free, np.int64, (cap, n_res)),
            ("allocatable", self.allocatable, np.int64, (cap, n_res)),
            ("schedulable", self.schedulable, np.bool_, (cap,)),
            ("domains", self.domains, np.int32, (self.n_levels, cap)),
        ):
            if not isinstance(arr, np.ndarray):
                raise ValueError(f"ClusterArrays.{name}: expected a numpy array, got {type(arr).__name__}")
            if arr.dtype != dtype:
                raise ValueError(
                    f"ClusterArrays.{name}: dtype {arr.dtype}, expected {np.dtype(dtype)}; "
                    f"assign with .astype({np.dtype(dtype).name})"
                )
            if arr.shape != shape:
                raise ValueError(f"ClusterArrays.{name}: shape {arr.shape}, expected {shape}")
            if not arr.flags.c_contiguous:
                raise ValueError(
                    f"ClusterArrays.{name}: not C-contiguous; assign np.ascontiguousarray(...), not a view"
                )
            if not arr.flags.writeable:
                raise ValueError(f"ClusterArrays.{name}: read-only; the kernels need a writable copy")
        if not 0 <= self.n_rows <= cap:
            raise ValueError(f"ClusterArrays.n_rows: {self.n_rows} is outside 0..capacity ({cap})")

    # -- internals ---------------------------------------------------------------------------

    def _as_vector(self, values: Sequence[int] | np.ndarray, *, field: str) -> np.ndarray:
        vec = np.asarray(values)
        if vec.shape == (len(self._resource_names),) and vec.shape[0] < self.n_res:
            vec = np.pad(vec, (0, self.n_res - vec.shape[0]))
        if vec.shape != (self.n_res,):
            raise ValueError(
                f"{field}: expected {self.n_res} values in column order {self._resource_names}, "
                f"got shape {vec.shape}"
            )
        if vec.dtype.kind not in "iu" and not (vec.dtype.kind == "f" and np.all(vec == np.floor(vec))):
            raise ValueError(f"{field}: expected integer units (milli-cpu, bytes, counts), got {vec.dtype}")
        vec = vec.astype(np.int64)
        if np.any(vec < 0):
            raise ValueError(f"{field}: negative amounts {vec.tolist()}; allocatable is never below zero")
        return vec

    def _require_row(self, row: int) -> None:
        if not self.row_in_use(row):
            raise ValueError(f"row {row} is not in use (n_rows={self.n_rows}); add_row first")

    def _domain_of(self, level: int, labels: Mapping[str, str]) -> int:
        value = labels.get(self._level_keys[level])
        if value is None:
            return -1
        ids = self._domain_ids[level]
        found = ids.get(value)
        if found is None:
            found = len(ids)
            ids[value] = found
            self._domain_names[level].append(value)
        return found

    def _grow(self, capacity: int) -> None:
        old_cap = self.capacity
        for attr in ("free", "allocatable"):
            old = getattr(self, attr)
            new = np.zeros((capacity, old.shape[1]), dtype=np.int64)
            new[:old_cap] = old
            setattr(self, attr, new)
        sched = np.zeros(capacity, dtype=np.bool_)
        sched[:old_cap] = self.schedulable
        self.schedulable = sched
        doms = np.full((self.n_levels, capacity), -1, dtype=np.int32)
        doms[:, :old_cap] = self.domains
        self.domains = doms
