"""The podgrouper: the KAI PodGroups it keeps for derived gangs are the ones `podgroups -f` prints,
it never touches anyone else's, follows spec changes, and looks only at what changed."""

from __future__ import annotations

import asyncio
import copy
import logging
import pathlib
from typing import Any

import pytest
import yaml

from extender.grouping import kai, podgroup_objects
from extender.model import labels as keys
from extender.model.group import MembershipState, Source
from extender.scheduling import podgrouper
from extender.scheduling.podgrouper import Action, Podgrouper, desired_podgroup, step_for
from extender.server.app import PODGROUPER
from extender.state.store import ClusterStore
from tests.builders import make_node, make_pod, rack_cluster
from tests.grouping.workloads import expand

SEED_DIR = pathlib.Path(__file__).resolve().parents[2] / "extender" / "scenarios" / "seed"
KAI_PG = kai.KAI_PODGROUP
MANAGED = {keys.MANAGED_BY: keys.MANAGER}


def seed(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((SEED_DIR / name).read_text()) if d]


def with_children(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The seed objects plus the child Jobs and pods their controllers would create."""
    out = list(objs)
    for obj in objs:
        owners, pods = expand(obj)
        out += owners + pods
    return out


def store_of(objs: list[dict[str, Any]]) -> ClusterStore:
    store = ClusterStore()
    for obj in objs:
        store.upsert(copy.deepcopy(obj))
    return store


def creates(effects: list) -> dict[str, dict[str, Any]]:
    assert {e.kind for e in effects} <= {"podgroup-create"}, effects
    return {e.name: e.data["object"] for e in effects}


def without_label(pg: dict[str, Any]) -> dict[str, Any]:
    pg = copy.deepcopy(pg)
    assert pg["metadata"].pop("labels") == MANAGED
    return pg


def job(name: str = "train", *, annotations: dict[str, str] | None = None, parallelism: int = 4) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "annotations": {keys.BATCH_MIN_MEMBER: str(parallelism), **(annotations or {})},
        },
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {"spec": {"containers": [{"name": "main", "image": "sleep:v0.1.0"}]}},
        },
    }


def managed_pg_of(workload: dict[str, Any], store: ClusterStore) -> dict[str, Any]:
    pg = desired_podgroup(workload, store)
    assert pg is not None
    pg["metadata"]["uid"] = "pg-uid"
    return pg


# ---------------------------------------------------------------- the desired objects

SEEDS_WITH_DERIVED_GANGS = [
    "batch-job.yaml",
    "batch-job-min-member.yaml",
    "kai-jobset-topology.yaml",
    "no-sched-baseline.yaml",
    "pytorch-job.yaml",
]
SEEDS_WITHOUT = [
    "external-podgroup-job.yaml",  # skip-podgrouper: the user's PodGroup is the group
    "single-gang.yaml",  # JobSet spec.scheduling: scheduling.k8s.io objects its controller owns
    "gang-training.yaml",
    "gang-suspend.yaml",
    "dra-shared-claim.yaml",
]


@pytest.mark.parametrize("name", SEEDS_WITH_DERIVED_GANGS)
def test_the_podgroup_kept_for_a_seed_workload_is_the_one_podgroups_prints(name: str) -> None:
    objs = seed(name)
    printed = {
        o["metadata"]["name"]: o for o in podgroup_objects(copy.deepcopy(objs)) if o["kind"] == "PodGroup"
    }
    # the controllers' child Jobs and pods are in the cache too: no PodGroup for a JobSet's child Job
    got = creates(Podgrouper(store_of(with_children(objs))).plan())
    assert len(got) == 1
    assert {n: without_label(pg) for n, pg in got.items()} == printed
    (pg,) = got.values()
    (owner,) = pg["metadata"]["ownerReferences"]
    assert owner["controller"] is True and owner["blockOwnerDeletion"] is True
    assert owner["kind"] == objs[-1]["kind"] and owner["name"] == objs[-1]["metadata"]["name"]
    assert pg["metadata"]["labels"] == MANAGED


@pytest.mark.parametrize("name", SEEDS_WITHOUT)
def test_a_seed_workload_without_a_derived_gang_gets_no_podgroup(name: str) -> None:
    assert Podgrouper(store_of(with_children(seed(name)))).plan() == []


def test_the_jobset_podgroup_says_min_sub_group_and_one_subgroup_per_replica() -> None:
    (pg,) = creates(Podgrouper(store_of(seed("kai-jobset-topology.yaml"))).plan()).values()
    spec = pg["spec"]
    assert "minSubGroup" in spec and "minMember" not in spec
    leaves = [s for s in spec["subGroups"] if "parent" in s]
    assert leaves and all("minMember" in s for s in leaves)


# ---------------------------------------------------------------- whose PodGroup

CASES = [
    # (what, workload annotations, an existing PodGroup: None | "ours" | "foreign", expected action)
    ("no PodGroup yet: create ours", {}, None, Action.CREATE),
    ("ours matches: nothing to do", {}, "ours", Action.KEEP),
    ("someone else's of the same name: left alone", {}, "foreign", Action.FOREIGN),
    ("skip-podgrouper: none is created", {keys.SKIP_PODGROUPER: "true"}, None, Action.KEEP),
    ("skip-podgrouper added: ours is deleted", {keys.SKIP_PODGROUPER: "true"}, "ours", Action.DELETE),
    (
        "skip-podgrouper and someone else's: left alone",
        {keys.SKIP_PODGROUPER: "true"},
        "foreign",
        Action.FOREIGN,
    ),
    ("an invalid workload: ours is left as it is", {keys.BATCH_MIN_MEMBER: "zero"}, "ours", Action.INVALID),
]


@pytest.mark.parametrize(("what", "annotations", "existing", "action"), CASES, ids=[c[0] for c in CASES])
def test_whose_podgroup_decides_what_is_written(
    what: str, annotations: dict[str, str], existing: str | None, action: Action
) -> None:
    workload = job()
    store = store_of([workload])
    pg = managed_pg_of(workload, store)
    if existing == "foreign":
        pg["metadata"].pop("labels")
    if existing is not None:
        store.upsert(pg)
    changed = copy.deepcopy(workload)
    changed["metadata"]["annotations"].update(annotations)
    store.upsert(changed)
    step = step_for((kai.JOB, "default/train"), store)
    assert step.action is action
    if action is Action.DELETE:
        assert step.effect is not None and step.effect.data["uid"] == "pg-uid"
    if action in (Action.FOREIGN, Action.INVALID):
        assert step.effect is None and step.message


def test_a_foreign_podgroup_is_logged_once_however_often_its_workload_changes(caplog) -> None:
    workload = job()
    store = store_of([workload])
    pg = managed_pg_of(workload, store)
    pg["metadata"].pop("labels")
    store.upsert(pg)
    grouper = Podgrouper(store)
    with caplog.at_level(logging.INFO, logger=podgrouper.__name__):
        for i in range(3):
            assert grouper.plan() == []
            workload["status"] = {"active": i}
            store.upsert(copy.deepcopy(workload))
    told = [r.getMessage() for r in caplog.records if "not created by gang-extender" in r.getMessage()]
    assert len(told) == 1 and kai.derived_name(workload) in told[0]


def test_a_child_job_is_never_top_level_even_while_its_jobset_is_out_of_the_cache() -> None:
    (jobset,) = seed("no-sched-baseline.yaml")
    child_jobs, _ = expand(jobset)
    store = store_of(child_jobs)  # the JobSet itself not (yet, or any more) cached
    assert Podgrouper(store).plan() == []


# ---------------------------------------------------------------- following changes


@pytest.mark.parametrize(
    ("what", "change", "expected_patch"),
    [
        (
            "min-member raised",
            lambda w: w["metadata"]["annotations"].update({keys.BATCH_MIN_MEMBER: "2"}),
            {"minMember": 2},
        ),
        (
            "queue label added",
            lambda w: w["metadata"].setdefault("labels", {}).update({keys.QUEUE: "team-a"}),
            {"queue": "team-a"},
        ),
        (
            "topology added",
            lambda w: w["metadata"]["annotations"].update(
                {keys.TOPOLOGY: "dc", keys.TOPOLOGY_REQUIRED: "rack"}
            ),
            {"topologyConstraint": {"topology": "dc", "requiredTopologyLevel": "rack"}},
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_spec_change_patches_only_the_fields_that_changed(what, change, expected_patch) -> None:
    workload = job(annotations={keys.BATCH_MIN_MEMBER: "1"})
    store = store_of([workload])
    store.upsert(managed_pg_of(workload, store))
    grouper = Podgrouper(store)
    assert grouper.plan() == []
    change(workload)
    store.upsert(copy.deepcopy(workload))
    (effect,) = grouper.plan()
    assert effect.kind == "podgroup-patch" and effect.name == kai.derived_name(workload)
    assert effect.data["patch"] == {"spec": expected_patch}


def test_a_removed_field_is_patched_to_null_and_a_field_not_ours_is_left_be() -> None:
    workload = job(annotations={keys.TOPOLOGY: "dc", keys.TOPOLOGY_REQUIRED: "rack"})
    store = store_of([workload])
    pg = managed_pg_of(workload, store)
    pg["spec"]["schedulingBackoff"] = 1  # a webhook's default: not a field the podgrouper renders
    store.upsert(pg)
    for k in (keys.TOPOLOGY, keys.TOPOLOGY_REQUIRED):
        workload["metadata"]["annotations"].pop(k)
    store.upsert(workload)
    step = step_for((kai.JOB, "default/train"), store)
    assert step.action is Action.UPDATE
    assert step.effect.data["patch"] == {"spec": {"topologyConstraint": None}}


def test_a_jobset_scaled_up_gets_its_new_replica_subgroups() -> None:
    (jobset,) = seed("no-sched-baseline.yaml")
    store = store_of([jobset])
    store.upsert(managed_pg_of(jobset, store))
    scaled = copy.deepcopy(jobset)
    scaled["spec"]["replicatedJobs"][0]["replicas"] = (
        jobset["spec"]["replicatedJobs"][0].get("replicas", 1) + 1
    )
    store.upsert(scaled)
    step = step_for((kai.JOBSET, f"default/{jobset['metadata']['name']}"), store)
    assert step.action is Action.UPDATE
    assert (
        step.effect.data["patch"]["spec"]["subGroups"] == desired_podgroup(scaled, store)["spec"]["subGroups"]
    )


# ---------------------------------------------------------------- only what changed


def test_only_changed_workloads_are_looked_at(monkeypatch) -> None:
    workloads = [job(f"j{i}") for i in range(50)]
    store = store_of(workloads)
    grouper = Podgrouper(store)
    effects = grouper.plan()
    assert len(effects) == 50  # the first plan looks at everything
    for e in effects:
        store.upsert(e.data["object"])  # what the watch shows once the creates land
    looked: list = []
    real = podgrouper.step_for
    monkeypatch.setattr(podgrouper, "step_for", lambda ref, s: looked.append(ref) or real(ref, s))
    assert grouper.plan() == [] and looked == []
    status_only = copy.deepcopy(workloads[7])
    status_only["status"] = {"active": 4}  # the Job controller's status write on a pod transition
    store.upsert(status_only)
    store.upsert(make_pod("p", owner=workloads[3]))  # not a workload
    assert grouper.plan() == [] and looked == []  # nothing grouping reads changed
    relabelled = copy.deepcopy(status_only)
    relabelled["metadata"]["labels"] = {"team": "a"}
    store.upsert(relabelled)
    assert grouper.plan() == [] and looked == [(kai.JOB, "default/j7")]


def test_ours_deleted_by_hand_is_created_again() -> None:
    workload = job()
    store = store_of([workload])
    pg = managed_pg_of(workload, store)
    store.upsert(pg)
    grouper = Podgrouper(store)
    assert grouper.plan() == []
    store.remove(pg)
    assert [e.kind for e in grouper.plan()] == ["podgroup-create"]


def test_a_failed_write_is_tried_again_after_the_retry_delay() -> None:
    now = [100.0]
    store = store_of([job()])
    grouper = Podgrouper(store, clock=lambda: now[0])
    (effect,) = grouper.plan()
    grouper.write_done(effect, ok=False)
    assert grouper.plan() == []
    now[0] += podgrouper.RETRY_S
    (effect,) = grouper.plan()
    grouper.write_done(effect, ok=False)  # refused again: the delay doubles
    now[0] += podgrouper.RETRY_S
    assert grouper.plan() == []
    now[0] += podgrouper.RETRY_S
    (effect,) = grouper.plan()
    grouper.write_done(effect, ok=True)  # it landed: the next failure starts from RETRY_S again
    store.upsert(effect.data["object"])
    assert grouper.plan() == []
    store.upsert({**job(), "metadata": {**job()["metadata"], "labels": {keys.QUEUE: "q"}}})
    (effect,) = grouper.plan()
    grouper.write_done(effect, ok=False)
    now[0] += podgrouper.RETRY_S
    assert [e.kind for e in grouper.plan()] == ["podgroup-patch"]


# ---------------------------------------------------------------- pods keep their gang


def test_a_managed_podgroup_in_the_cache_changes_no_pods_gang() -> None:
    workload = job(parallelism=2)
    _, pods = expand(workload)
    store = store_of([workload, *pods])
    before = {k: store.membership(r) for k, r in store.pods.items()}
    store.upsert(managed_pg_of(workload, store))
    after = {k: store.membership(r) for k, r in store.pods.items()}
    assert after == before
    for m in after.values():
        assert m.state is MembershipState.MEMBER and m.group.source is Source.KAI_DERIVED
        assert m.group.key == kai.derived_key(workload)


# ---------------------------------------------------------------- in the service


async def settle(svc) -> None:
    for _ in range(3):
        await svc.expire(0.01)
        await asyncio.sleep(0.01)


async def test_the_service_creates_the_podgroup_and_the_flag_turns_it_off(make_service) -> None:
    objs = [make_node("n1"), *seed("pytorch-job.yaml")]
    on = await make_service(copy.deepcopy(objs))
    await settle(on)
    (pg,) = on.cluster.list(*KAI_PG)
    (workload,) = on.cluster.list("kubeflow.org", "PyTorchJob")
    assert pg["metadata"]["name"] == kai.derived_name(workload)
    assert pg["metadata"]["labels"] == MANAGED
    assert pg["metadata"]["ownerReferences"][0]["uid"] == workload["metadata"]["uid"]

    off = await make_service(copy.deepcopy(objs), cluster_podgrouper=False)
    await settle(off)
    assert off.app[PODGROUPER] is None
    assert off.cluster.list(*KAI_PG) == []


async def test_the_service_deletes_ours_when_skip_podgrouper_is_added(make_service) -> None:
    svc = await make_service([make_node("n1"), job()])
    await settle(svc)
    assert len(svc.cluster.list(*KAI_PG)) == 1
    marked = svc.cluster.get("batch", "Job", "default", "train")
    marked["metadata"]["annotations"][keys.SKIP_PODGROUPER] = "true"
    svc.cluster.apply(marked)
    await settle(svc)
    assert svc.cluster.list(*KAI_PG) == []


# ---------------------------------------------------------------- status on the derived gang's PodGroup


@pytest.mark.parametrize(
    ("whose", "expect_status"),
    [("ours", True), ("foreign", False)],
    ids=["ours gets the gang's status", "someone else's of the same name is never written"],
)
async def test_a_derived_gangs_status_goes_on_our_podgroup_only(make_service, whose, expect_status) -> None:
    from tests.scheduling.test_gang_flow import bind_all

    workload = job(parallelism=2)
    _, pods = expand(workload)
    objs = [*rack_cluster(), workload, *pods]
    if whose == "foreign":
        pg = desired_podgroup(workload, store_of([workload]))
        pg["metadata"].pop("labels")
        objs.append(pg)
    svc = await make_service(objs)
    await settle(svc)
    assert set((await bind_all(svc, [p["metadata"]["name"] for p in pods])).values()) == {""}
    await settle(svc)
    pg = svc.cluster.get(*KAI_PG, "default", kai.derived_name(workload))
    if expect_status:
        assert pg["status"] == {"phase": "Running", "running": 2, "pending": 0}
    else:
        assert "status" not in pg and "labels" not in pg["metadata"]


async def test_a_gang_bound_before_its_podgroup_landed_gets_its_status_once_it_does(
    make_service, monkeypatch
) -> None:
    from tests.scheduling.test_gang_flow import bind_all

    workload = job(parallelism=2)
    _, pods = expand(workload)
    svc = await make_service([*rack_cluster(), workload, *pods])
    real = svc.cluster.create_object
    refused: list = []

    async def refuse(**kw: Any) -> bool:
        refused.append(kw)
        return False

    monkeypatch.setattr(svc.cluster, "create_object", refuse)
    await settle(svc)
    assert refused and svc.cluster.list(*KAI_PG) == []
    assert set((await bind_all(svc, [p["metadata"]["name"] for p in pods])).values()) == {""}
    await settle(svc)
    monkeypatch.setattr(svc.cluster, "create_object", real)
    await svc.expire(podgrouper.RETRY_S)
    await settle(svc)
    (pg,) = svc.cluster.list(*KAI_PG)
    assert pg["status"] == {"phase": "Running", "running": 2, "pending": 0}


def test_a_large_first_pass_is_spread_over_plans(monkeypatch) -> None:
    monkeypatch.setattr(podgrouper, "MAX_PER_PLAN", 7)
    grouper = Podgrouper(store_of([job(f"j{i:02}") for i in range(20)]))
    sizes = [len(grouper.plan()) for _ in range(4)]
    assert sizes == [7, 7, 6, 0]


def test_the_podgroup_kind_served_after_start_up_gets_every_podgroup_written_at_once() -> None:
    """KAI's PodGroup CRD installed after the service: the creates refused meanwhile (the kind not
    served) backed off for minutes; once the kind's first list is in, every workload's PodGroup is
    written at the next pass."""
    now = [100.0]
    store = store_of([job()])
    store.listed = frozenset({("", "Pod"), ("", "Node"), kai.JOB})
    grouper = Podgrouper(store, clock=lambda: now[0])
    for _ in range(6):  # refused (404), the delay doubling towards RETRY_MAX_S
        (effect,) = grouper.plan()
        grouper.write_done(effect, ok=False)
        now[0] += podgrouper.RETRY_MAX_S
    (effect,) = grouper.plan()
    grouper.write_done(effect, ok=False)
    now[0] += podgrouper.RETRY_S
    assert grouper.plan() == []  # backing off
    store.now_lists(kai.KAI_PODGROUP)
    assert [e.kind for e in grouper.plan()] == ["podgroup-create"]


def malformed_jobset() -> dict[str, Any]:
    """Schema-valid: JobSet's CRD keeps spec.scheduling with x-kubernetes-preserve-unknown-fields."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "aaa", "namespace": "default", "uid": "aaa-uid"},
        "spec": {
            "scheduling": {"replicatedJobs": [{"targetReplicatedJobs": [["w"]]}]},
            "replicatedJobs": [
                {
                    "name": "w",
                    "replicas": 1,
                    "template": {"spec": {"parallelism": 1, "template": {"spec": {}}}},
                }
            ],
        },
    }


async def test_one_malformed_jobset_costs_no_other_workload_its_podgroup(make_service, caplog) -> None:
    """A JobSet whose spec.scheduling targets a list, not a name (found by review: a TypeError ended
    the podgrouper's pass, and the valid Job of the same batch never got its PodGroup)."""
    good = job("good", parallelism=2)
    svc = await make_service([make_node("n1"), malformed_jobset(), good])
    for _ in range(3):
        await svc.expire(0.1)
    failed = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert svc.cluster.get("scheduling.run.ai", "PodGroup", "default", "pg-good-uid-good") is not None, failed
    assert not failed, failed
    step = step_for((("jobset.x-k8s.io", "JobSet"), "default/aaa"), svc.store)
    assert step.action is Action.INVALID
    assert "spec.scheduling.replicatedJobs[0].targetReplicatedJobs[0]: must be a replicatedJob's name" in (
        step.message
    )
