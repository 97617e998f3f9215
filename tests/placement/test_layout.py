"""ClusterArrays keeps free capacity, domains and slots consistent through incremental updates."""

from __future__ import annotations

import numpy as np
import pytest

from extender.placement import ClusterArrays


def two_racks() -> ClusterArrays:
    arrays = ClusterArrays(resource_names=["cpu", "gpu"], capacity=2)
    arrays.add_row(allocatable=[4000, 8], labels={"rack": "a"}, schedulable=True)
    arrays.add_row(allocatable=[4000, 8], labels={"rack": "b"}, schedulable=True)
    return arrays


def test_a_level_registered_after_the_rows_reads_their_labels() -> None:
    arrays = two_racks()
    rack = arrays.level("rack")
    assert arrays.domains[rack, :2].tolist() == [0, 1]
    assert [arrays.domain_name(rack, d) for d in (0, 1)] == ["a", "b"]
    assert arrays.level("rack") == rack and arrays.level_key(rack) == "rack"


def test_rows_added_after_a_level_get_their_domain_and_unlabelled_rows_get_minus_one() -> None:
    arrays = two_racks()
    rack = arrays.level("rack")
    row = arrays.add_row(allocatable=[1, 1], labels={"zone": "z"}, schedulable=True)
    again = arrays.add_row(allocatable=[1, 1], labels={"rack": "b"}, schedulable=True)
    assert arrays.domains[rack, row] == -1 and arrays.domains[rack, again] == 1


def test_capacity_grows_past_the_initial_size_and_keeps_the_contract() -> None:
    arrays = ClusterArrays(resource_names=["cpu"], capacity=1)
    arrays.level("rack")
    for i in range(40):
        arrays.add_row(allocatable=[i], labels={"rack": str(i % 3)}, schedulable=True)
    arrays.check()
    assert arrays.n_rows == 40 and arrays.capacity >= 40
    assert arrays.free[:40, 0].tolist() == list(range(40))
    assert arrays.domains[0, :6].tolist() == [0, 1, 2, 0, 1, 2]


def test_a_new_allocatable_moves_free_by_the_difference_so_bound_pods_stay_counted() -> None:
    arrays = two_racks()
    arrays.sub(0, np.array([1500, 2]))
    assert not arrays.update_row(0, allocatable=[3000, 8]), "no label changed: the row stays in its domains"
    assert arrays.free[0].tolist() == [1500, 6]
    arrays.add(0, np.array([1500, 2]))
    assert arrays.free[0].tolist() == [3000, 8]


def test_relabelling_a_row_moves_it_between_domains() -> None:
    arrays = two_racks()
    rack = arrays.level("rack")
    assert not arrays.update_row(1, labels={"rack": "b", "team": "a"}), "a label of no level moves nothing"
    assert arrays.update_row(1, labels={"rack": "c"}, schedulable=False), "it says the row moved"
    assert arrays.domains[rack, 1] == 2 and not arrays.schedulable[1]


def test_a_removed_row_is_a_free_slot_that_the_next_node_reuses() -> None:
    arrays = two_racks()
    rack = arrays.level("rack")
    arrays.remove_row(0)
    assert not arrays.schedulable[0] and arrays.free[0].tolist() == [0, 0] and arrays.domains[rack, 0] == -1
    assert arrays.add_row(allocatable=[1, 1], labels={"rack": "b"}, schedulable=True) == 0
    assert arrays.n_rows == 2


def test_a_new_resource_is_a_zero_column_and_old_columns_keep_their_values() -> None:
    arrays = two_racks()
    arrays.sub(1, np.array([1000, 1]))
    col = arrays.add_resource("example.com/nic")
    assert col == 2 and arrays.add_resource("example.com/nic") == 2
    assert arrays.free[:2, :3].tolist() == [[4000, 8, 0], [3000, 7, 0]]
    assert not arrays.free[:, 3:].any()  # spare columns: zero until a name takes them
    arrays.check()


def test_new_resources_grow_the_columns_by_doubling_not_one_copy_per_name() -> None:
    arrays = two_racks()
    widths = set()
    for i in range(100):
        col = arrays.add_resource(f"example.com/dev-{i}")
        assert arrays.resource_names[col] == f"example.com/dev-{i}"
        widths.add(arrays.n_res)
    assert len(widths) <= 8  # 2 -> 4 -> ... -> 128: a handful of copies for 100 names
    assert arrays.free.shape[1] == arrays.n_res >= len(arrays.resource_names) == 102
    # a vector of the named columns only is padded to the physical width
    arrays.update_row(0, allocatable=[4000, 8] + [1] * 100)
    assert arrays.allocatable[0, :102].tolist() == [4000, 8] + [1] * 100
    arrays.check()


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (lambda a: a.add_row(allocatable=[1], labels={}, schedulable=True), "expected 2 values"),
        (lambda a: a.add_row(allocatable=[1, -1], labels={}, schedulable=True), "negative"),
        (lambda a: a.add_row(allocatable=[0.5, 1], labels={}, schedulable=True), "integer units"),
        (lambda a: a.update_row(7, schedulable=True), "row 7 is not in use"),
        (lambda a: a.remove_row(-1), "not in use"),
    ],
    ids=[
        "an allocatable with too few columns is refused",
        "a negative allocatable is refused",
        "fractional units are refused",
        "updating a row never added is refused",
        "removing a negative row is refused",
    ],
)
def test_bad_row_input_names_the_problem(action, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        action(two_racks())


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        (lambda a: setattr(a, "free", a.free.astype(np.int32)), "free: dtype int32"),
        (lambda a: setattr(a, "allocatable", np.asfortranarray(a.allocatable)), "not C-contiguous"),
        (lambda a: setattr(a, "schedulable", a.schedulable[:1]), "schedulable: shape"),
    ],
    ids=["a narrowed free array is named", "a Fortran-order array is named", "a truncated mask is named"],
)
def test_check_says_what_to_fix(breakage, message: str) -> None:
    arrays = two_racks()
    breakage(arrays)
    with pytest.raises(ValueError, match=message):
        arrays.check()


def test_duplicate_resource_names_are_refused() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        ClusterArrays(resource_names=["cpu", "cpu"])
