"""The compiled hot loops of the placement core, and the typed wrappers that call them.

Every `_kernel` here is module-level `@njit(cache=True)`, takes arrays and scalars only, writes
into outputs its wrapper allocated, and calls only helpers from this file (numba's cache does
not notice edits in other files). The public functions without a leading underscore are the
typed wrappers; `api.py` is their only caller. Nothing outside `extender/placement` imports
this module.

Shared argument conventions (dtype, shape):
  free, allocatable: int64[capacity, n_res] C-order; schedulable: bool[capacity]
  dom_row: int32[capacity], one level's row of ClusterArrays.domains (-1 = unlabelled)
  scope: int32[k] node rows, ascending; the only rows a call may look at
  requests: int64[n_leaves, n_res]; one pod of each leaf
  elig: bool[n_masks, capacity or n_rows]; leaf_elig: int32[n_leaves], the leaf's row of elig or
    -1 for "every schedulable node"
  log_rows, log_leaves: int32[m]; the placements made so far in this plan (entries < n_log).
    A plan never writes to `free`: kernels subtract the log instead, so rolling back a trial
    is just forgetting log entries.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Sort key for rows without a domain at the spill level: after every labelled domain.
_UNRANKED = np.int64(1) << np.int64(40)


@njit(cache=True, nogil=True)
def _eligible_any(r, elig, leaf_elig, group_leaves):
    """True when row r may host a pod of at least one leaf of group_leaves (int32[g])."""
    for i in range(group_leaves.shape[0]):
        m = leaf_elig[group_leaves[i]]
        if m < 0 or elig[m, r]:
            return True
    return False


@njit(cache=True, nogil=True)
def _position(scope, r):
    """Index of row r in the ascending scope, or -1."""
    i = np.searchsorted(scope, r)
    if i < scope.shape[0] and scope[i] == r:
        return i
    return -1


@njit(cache=True, nogil=True)
def _domain_totals(
    free,
    schedulable,
    dom_row,
    scope,
    demand,
    elig,
    leaf_elig,
    group_leaves,
    requests,
    log_rows,
    log_leaves,
    n_log,
    totals,
    row_counts,
    starts,
    grouped,
):
    """Per-domain free capacity and row lists over a scope, for one group of leaves.

    demand: int64[n_res], the group's total request (only columns > 0 are summed).
    Outputs (zeroed by the wrapper): totals int64[n_domains, n_res] sums of max(free, 0) minus
    the log; row_counts int64[n_domains]; starts int64[n_domains + 1] and grouped int32[k]: the
    counted rows of domain d are grouped[starts[d]:starts[d + 1]], ascending.
    Counted rows are schedulable, labelled at the level and eligible for some leaf of the group.
    """
    n_res = free.shape[1]
    n_domains = row_counts.shape[0]
    cols = np.empty(n_res, dtype=np.int64)
    n_cols = 0
    for j in range(n_res):
        if demand[j] > 0:
            cols[n_cols] = j
            n_cols += 1
    every = False
    for i in range(group_leaves.shape[0]):
        if leaf_elig[group_leaves[i]] < 0:
            every = True
    k = scope.shape[0]
    # The domain of each counted scope position, so the scatter pass repeats no checks.
    pos_dom = np.empty(k, dtype=np.int32)
    for i in range(k):
        r = scope[i]
        d = dom_row[r]
        if d < 0 or not schedulable[r] or (not every and not _eligible_any(r, elig, leaf_elig, group_leaves)):
            pos_dom[i] = -1
            continue
        pos_dom[i] = d
        row_counts[d] += 1
        for c in range(n_cols):
            v = free[r, cols[c]]
            if v > 0:
                totals[d, cols[c]] += v
    for e in range(n_log):
        p = _position(scope, log_rows[e])
        if p < 0:
            continue
        d = pos_dom[p]
        if d < 0:
            continue
        leaf = log_leaves[e]
        for c in range(n_cols):
            totals[d, cols[c]] -= requests[leaf, cols[c]]
    starts[0] = 0
    for d in range(n_domains):
        starts[d + 1] = starts[d] + row_counts[d]
    cursor = starts[:n_domains].copy()
    for i in range(k):
        d = pos_dom[i]
        if d >= 0:
            grouped[cursor[d]] = scope[i]
            cursor[d] += 1
    return starts[n_domains]


@njit(cache=True, nogil=True)
def _order_domains(totals, row_counts, demand, pinned, restrict, descending, include_unfit, ratio, order):
    """Domains in the order a constraint tries them; returns how many entries of `order` are set.

    ratio[d] (output, float64[n_domains]) = min over demanded columns of totals/demand: how many
    copies of the group the domain holds by summed capacity, so the smallest is the tightest.
    A domain is listed when it has counted rows, fits by summed capacity (unless include_unfit),
    and is pinned (when restrict). Order: pinned first, then ratio ascending (descending when
    `descending`), then domain id.
    """
    n_domains = row_counts.shape[0]
    n_res = demand.shape[0]
    ids = np.empty(n_domains, dtype=np.int64)
    n = 0
    for d in range(n_domains):
        if row_counts[d] <= 0:
            continue
        best = np.inf
        fits = True
        any_demand = False
        for j in range(n_res):
            if demand[j] > 0:
                any_demand = True
                q = totals[d, j] / demand[j]
                if q < best:
                    best = q
                if totals[d, j] < demand[j]:
                    fits = False
        if not any_demand:
            best = float(row_counts[d])
        ratio[d] = best
        if not fits and not include_unfit:
            continue
        if restrict and not pinned[d]:
            continue
        ids[n] = d
        n += 1
    ids = ids[:n]
    keys = np.empty(n, dtype=np.float64)
    for i in range(n):
        keys[i] = -ratio[ids[i]] if descending else ratio[ids[i]]
    ids = ids[np.argsort(keys, kind="mergesort")]
    any_pinned = False
    for i in range(n):
        if pinned[ids[i]]:
            any_pinned = True
            break
    if any_pinned:
        pin_key = np.empty(n, dtype=np.int64)
        for i in range(n):
            pin_key[i] = 0 if pinned[ids[i]] else 1
        ids = ids[np.argsort(pin_key, kind="mergesort")]
    for i in range(n):
        order[i] = ids[i]
    return n


@njit(cache=True, nogil=True)
def _fill(
    free,
    allocatable,
    scarce,
    schedulable,
    scope,
    requests,
    counts,
    leaves,
    elig,
    leaf_elig,
    log_rows,
    log_leaves,
    n_log,
    spill_dom,
    dom_rank,
    use_rank,
):
    """Place counts[l] pods of each leaf in `leaves` (largest first) on rows of scope.

    Each leaf goes onto the most-allocated rows that fit (least free share of the requested
    resources, ties by row), filling a row before moving on. Rows offering a scarce resource the
    leaf does not request (a GPU node for a CPU pod) come after every other row. With use_rank,
    rows are first ordered by dom_rank[spill_dom[row]] so a spill uses as few domains of that
    level as possible.
    Appends placements to the log from n_log on; returns the new log length (short when some
    pods found no room; the caller rolls back).
    """
    k = scope.shape[0]
    n_res = free.shape[1]
    local = np.empty((k, n_res), dtype=np.int64)
    for i in range(k):
        for j in range(n_res):
            local[i, j] = free[scope[i], j]
    for e in range(n_log):
        p = _position(scope, log_rows[e])
        if p >= 0:
            for j in range(n_res):
                local[p, j] -= requests[log_leaves[e], j]
    cand = np.empty(k, dtype=np.int64)
    ukey = np.empty(k, dtype=np.float64)
    for li in range(leaves.shape[0]):
        leaf = leaves[li]
        need = counts[leaf]
        if need <= 0:
            continue
        m = leaf_elig[leaf]
        n = 0
        for i in range(k):
            r = scope[i]
            if not schedulable[r]:
                continue
            if m >= 0 and not elig[m, r]:
                continue
            ok = True
            u = 0.0
            for j in range(n_res):
                q = requests[leaf, j]
                if local[i, j] < q:
                    ok = False
                    break
                if q > 0:
                    a = allocatable[r, j]
                    if a > 0:
                        u += local[i, j] / a
            if not ok:
                continue
            for j in range(n_res):
                if scarce[j] and requests[leaf, j] == 0 and allocatable[r, j] > 0:
                    u += n_res + 1.0  # beyond any share sum: such rows sort last
                    break
            cand[n] = i
            ukey[n] = u
            n += 1
        sel = cand[:n][np.argsort(ukey[:n], kind="mergesort")]
        if use_rank:
            rkey = np.empty(n, dtype=np.int64)
            for t in range(n):
                d = spill_dom[scope[sel[t]]]
                rkey[t] = dom_rank[d] if d >= 0 else _UNRANKED
            sel = sel[np.argsort(rkey, kind="mergesort")]
        for t in range(n):
            if need <= 0:
                break
            i = sel[t]
            while need > 0:
                fits = True
                for j in range(n_res):
                    if local[i, j] < requests[leaf, j]:
                        fits = False
                        break
                if not fits:
                    break
                for j in range(n_res):
                    local[i, j] -= requests[leaf, j]
                log_rows[n_log] = scope[i]
                log_leaves[n_log] = leaf
                n_log += 1
                need -= 1
    return n_log


@njit(cache=True, nogil=True)
def _fits_per_domain(
    free,
    allocatable,
    scarce,
    schedulable,
    starts,
    grouped,
    requests,
    counts,
    leaves,
    elig,
    leaf_elig,
    log_rows,
    log_leaves,
    n_log,
    out,
):
    """out[d] = pods of `leaves` that a flat fill places inside domain d (the no-fit report).

    Uses the log beyond n_log as scratch; the log itself is left as it was.
    """
    no_rank = np.zeros(1, dtype=np.int64)
    no_dom = np.full(1, -1, dtype=np.int32)
    for d in range(out.shape[0]):
        lo = starts[d]
        hi = starts[d + 1]
        if hi <= lo:
            out[d] = 0
            continue
        end = _fill(
            free,
            allocatable,
            scarce,
            schedulable,
            grouped[lo:hi],
            requests,
            counts,
            leaves,
            elig,
            leaf_elig,
            log_rows,
            log_leaves,
            n_log,
            no_dom,
            no_rank,
            False,
        )
        out[d] = end - n_log


@njit(cache=True, nogil=True)
def _fit_mask(free, rows, request, out):
    """out[i] = request (int64[n_res]) fits free[rows[i]]."""
    n_res = free.shape[1]
    for i in range(rows.shape[0]):
        r = rows[i]
        ok = True
        for j in range(n_res):
            if free[r, j] < request[j]:
                ok = False
                break
        out[i] = ok


@njit(cache=True, nogil=True)
def _fingerprint_step(h1, h2, c):
    """One byte into two 32- and 31-bit FNV-1a-style lanes, in int64 so no step overflows."""
    return ((h1 ^ c) * 16777619) & 0xFFFFFFFF, ((h2 ^ c) * 1540483477) & 0x7FFFFFFF


@njit(cache=True, nogil=True)
def _fingerprint(h1, h2):
    """A name's 63-bit fingerprint from its lanes; never 0 (an empty slot)."""
    f = (h2 << 32) | h1
    return f if f != 0 else 1


@njit(cache=True, nogil=True)
def _index_names(chars, offsets, rows, fps, slot_rows):
    """Open addressing of name i (chars[offsets[i]:offsets[i + 1]], on row rows[i]) by fingerprint.

    fps: int64[2^m] zeroed, slot_rows: int32[2^m]. Two names with one fingerprint share a slot whose
    row is -2: a lookup that meets it declines, so no name is ever taken for another indexed name."""
    mask = fps.shape[0] - 1
    for i in range(offsets.shape[0] - 1):
        h1, h2 = 2166136261, 5381
        for j in range(offsets[i], offsets[i + 1]):
            h1, h2 = _fingerprint_step(h1, h2, np.int64(chars[j]))
        f = _fingerprint(h1, h2)
        s = f & mask
        while fps[s] != 0 and fps[s] != f:
            s = (s + 1) & mask
        slot_rows[s] = rows[i] if fps[s] == 0 else -2
        fps[s] = f


@njit(cache=True, nogil=True)
def _skip_space(array, i):
    while i < array.shape[0] and (array[i] == 32 or array[i] == 9 or array[i] == 10 or array[i] == 13):
        i += 1
    return i


@njit(cache=True, nogil=True)
def _rows_of_names(array, fps, slot_rows, out):
    """array (uint8): a JSON array of strings. out[j] = the row of the j-th string's name, -1 when
    no indexed name has its fingerprint. Returns the number of strings, or -1 to decline: array is
    not a plain array of strings whose bytes are their text (an escape, a control byte, another
    value, trailing bytes), or a string's fingerprint is shared by two indexed names."""
    n = array.shape[0]
    mask = fps.shape[0] - 1
    i = _skip_space(array, 0)
    if i >= n or array[i] != 91:  # [
        return -1
    i = _skip_space(array, i + 1)
    count = 0
    if i < n and array[i] == 93:  # ]
        return count if _skip_space(array, i + 1) == n else -1
    while True:
        if i >= n or array[i] != 34:  # "
            return -1
        end = i + 1
        h1, h2 = 2166136261, 5381  # the fingerprint, in the same pass as the scan
        while end < n and array[end] != 34:
            c = np.int64(array[end])
            if c == 92 or c < 32:  # backslash, control byte
                return -1
            h1, h2 = _fingerprint_step(h1, h2, c)
            end += 1
        if end >= n:
            return -1
        f = _fingerprint(h1, h2)
        s = f & mask
        row = -1
        while fps[s] != 0:
            if fps[s] == f:
                row = slot_rows[s]
                break
            s = (s + 1) & mask
        if row == -2:
            return -1
        out[count] = row
        count += 1
        i = _skip_space(array, end + 1)
        if i < n and array[i] == 44:  # ,
            i = _skip_space(array, i + 1)
        elif i < n and array[i] == 93:
            return count if _skip_space(array, i + 1) == n else -1
        else:
            return -1


@njit(cache=True, nogil=True)
def _score_nodes(free, allocatable, scarce, domains, rows, request, anchor_rows, anchor_levels, out):
    """out[i] in 0..10 for rows[i]: bin-packing after placing request, blended with closeness.

    Packing = mean over requested columns of min(1, used-after / allocatable); 0 if it does not
    fit; mapped to [0, 0.3) on a row offering a scarce resource the request does not ask for and to
    [0.3, 1] elsewhere, so such rows score below all others. Closeness =
    (i + 1) / len(anchor_levels) for the deepest (last) anchor level at which the row shares a
    domain with some anchor row, 0 if none. With anchors, score = round(10 * (packing +
    closeness) / 2), else round(10 * packing).
    """
    n_res = free.shape[1]
    n_lv = anchor_levels.shape[0]
    use_close = n_lv > 0 and anchor_rows.shape[0] > 0
    for i in range(rows.shape[0]):
        r = rows[i]
        fits = True
        pack = 0.0
        cols = 0
        for j in range(n_res):
            q = request[j]
            if free[r, j] < q:
                fits = False
                break
            a = allocatable[r, j]
            if q > 0 and a > 0:
                used = (a - free[r, j] + q) / a
                if used > 1.0:
                    used = 1.0
                if used < 0.0:
                    used = 0.0
                pack += used
                cols += 1
        if not fits:
            out[i] = 0
            continue
        if cols > 0:
            pack = pack / cols
        # as in _fill: a row offering a scarce resource the request does not ask for ranks below
        # every other row, so its packing maps to [0, 0.3) and the others' to [0.3, 1]
        spare = False
        for j in range(n_res):
            if scarce[j] and request[j] == 0 and allocatable[r, j] > 0:
                spare = True
                break
        pack = 0.3 * pack if spare else 0.3 + 0.7 * pack
        x = pack
        if use_close:
            depth = 0
            for li in range(n_lv):
                lv = anchor_levels[li]
                d = domains[lv, r]
                if d < 0:
                    continue
                for a_i in range(anchor_rows.shape[0]):
                    if domains[lv, anchor_rows[a_i]] == d:
                        depth = li + 1
                        break
            x = 0.5 * pack + 0.5 * (depth / n_lv)
        s = np.int64(np.floor(10.0 * x + 0.5))
        if s < 0:
            s = 0
        if s > 10:
            s = 10
        out[i] = s


# -- typed wrappers (the only callers of the kernels) -------------------------------------------


class DomainTotals:
    """One level's domains over a scope: summed free capacity and the rows of each domain."""

    __slots__ = ("grouped", "row_counts", "starts", "totals")

    def __init__(self, totals: np.ndarray, row_counts: np.ndarray, starts: np.ndarray, grouped: np.ndarray):
        self.totals = totals
        self.row_counts = row_counts
        self.starts = starts
        self.grouped = grouped

    def rows(self, domain_id: int) -> np.ndarray:
        return self.grouped[self.starts[domain_id] : self.starts[domain_id + 1]]


def domain_totals(
    *,
    free: np.ndarray,
    schedulable: np.ndarray,
    dom_row: np.ndarray,
    n_domains: int,
    scope: np.ndarray,
    demand: np.ndarray,
    elig: np.ndarray,
    leaf_elig: np.ndarray,
    group_leaves: np.ndarray,
    requests: np.ndarray,
    log_rows: np.ndarray,
    log_leaves: np.ndarray,
    n_log: int,
) -> DomainTotals:
    totals = np.zeros((n_domains, free.shape[1]), dtype=np.int64)
    row_counts = np.zeros(n_domains, dtype=np.int64)
    starts = np.zeros(n_domains + 1, dtype=np.int64)
    grouped = np.empty(scope.shape[0], dtype=np.int32)
    used = _domain_totals(
        free,
        schedulable,
        dom_row,
        scope,
        demand,
        elig,
        leaf_elig,
        group_leaves,
        requests,
        log_rows,
        log_leaves,
        n_log,
        totals,
        row_counts,
        starts,
        grouped,
    )
    return DomainTotals(totals, row_counts, starts, grouped[:used])


def order_domains(
    dt: DomainTotals,
    *,
    demand: np.ndarray,
    pinned: np.ndarray,
    restrict: bool,
    descending: bool,
    include_unfit: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """(domain ids in trial order, ratio per domain); see _order_domains."""
    n_domains = dt.row_counts.shape[0]
    ratio = np.zeros(n_domains, dtype=np.float64)
    order = np.empty(n_domains, dtype=np.int64)
    n = _order_domains(
        dt.totals, dt.row_counts, demand, pinned, restrict, descending, include_unfit, ratio, order
    )
    return order[:n], ratio


def fill(
    *,
    free: np.ndarray,
    allocatable: np.ndarray,
    scarce: np.ndarray,
    schedulable: np.ndarray,
    scope: np.ndarray,
    requests: np.ndarray,
    counts: np.ndarray,
    leaves: np.ndarray,
    elig: np.ndarray,
    leaf_elig: np.ndarray,
    log_rows: np.ndarray,
    log_leaves: np.ndarray,
    n_log: int,
    spill_dom: np.ndarray,
    dom_rank: np.ndarray,
    use_rank: bool,
) -> int:
    return int(
        _fill(
            free,
            allocatable,
            scarce,
            schedulable,
            scope,
            requests,
            counts,
            leaves,
            elig,
            leaf_elig,
            log_rows,
            log_leaves,
            n_log,
            spill_dom,
            dom_rank,
            use_rank,
        )
    )


def fits_per_domain(
    dt: DomainTotals,
    *,
    free: np.ndarray,
    allocatable: np.ndarray,
    scarce: np.ndarray,
    schedulable: np.ndarray,
    requests: np.ndarray,
    counts: np.ndarray,
    leaves: np.ndarray,
    elig: np.ndarray,
    leaf_elig: np.ndarray,
    log_rows: np.ndarray,
    log_leaves: np.ndarray,
    n_log: int,
) -> np.ndarray:
    out = np.zeros(dt.row_counts.shape[0], dtype=np.int64)
    _fits_per_domain(
        free,
        allocatable,
        scarce,
        schedulable,
        dt.starts,
        dt.grouped,
        requests,
        counts,
        leaves,
        elig,
        leaf_elig,
        log_rows,
        log_leaves,
        n_log,
        out,
    )
    return out


def fit_mask(*, free: np.ndarray, rows: np.ndarray, request: np.ndarray) -> np.ndarray:
    out = np.zeros(rows.shape[0], dtype=np.bool_)
    _fit_mask(free, rows, request, out)
    return out


def score_nodes(
    *,
    free: np.ndarray,
    allocatable: np.ndarray,
    scarce: np.ndarray,
    domains: np.ndarray,
    rows: np.ndarray,
    request: np.ndarray,
    anchor_rows: np.ndarray,
    anchor_levels: np.ndarray,
) -> np.ndarray:
    out = np.zeros(rows.shape[0], dtype=np.int64)
    _score_nodes(free, allocatable, scarce, domains, rows, request, anchor_rows, anchor_levels, out)
    return out


def index_names(*, chars: np.ndarray, offsets: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(fps, slot_rows) for `rows_of_names`: about two slots per name, 12 bytes each."""
    slots = 1 << max(4, (2 * (offsets.shape[0] - 1)).bit_length())
    fps = np.zeros(slots, dtype=np.int64)
    slot_rows = np.full(slots, -1, dtype=np.int32)
    _index_names(chars, offsets, rows, fps, slot_rows)
    return fps, slot_rows


def rows_of_names(*, array: np.ndarray, fps: np.ndarray, slot_rows: np.ndarray) -> np.ndarray | None:
    out = np.empty(array.shape[0] // 3 + 1, dtype=np.int32)  # each string takes at least `"",`
    count = _rows_of_names(array, fps, slot_rows, out)
    return None if count < 0 else out[:count]
