"""The neighbours of the seed cases a user would try: suspend, elastic scaling, sequenced startup,
batch-min-member clamping, invalid specs, unreadable owners, external and scheduling.k8s.io groups."""

from __future__ import annotations

import copy
import pathlib

import pytest
import yaml

from extender.grouping import (
    GroupingError,
    ListLookup,
    compile_jobset,
    derive_membership,
    groups_for_workload,
    kai,
    podgroup_objects,
)
from extender.grouping.membership import is_single_pod
from extender.model import labels as keys
from extender.model.group import Disruption, MembershipState, Policy, Source
from tests.grouping.workloads import expand

SEED_DIR = pathlib.Path(__file__).resolve().parents[2] / "extender" / "scenarios" / "seed"


def seed(name: str) -> dict:
    return next(
        d
        for d in yaml.safe_load_all((SEED_DIR / name).read_text())
        if d and d["kind"] != "Topology" and d["kind"] != "ResourceClaimTemplate" and d["kind"] != "PodGroup"
    )


def jobset(rjs: list[tuple[str, int, int]], scheduling=None, **spec) -> dict:
    out = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "namespace": "ml", "uid": "js-uid"},
        "spec": {
            "replicatedJobs": [
                {"name": n, "replicas": r, "template": {"spec": {"parallelism": p, "template": {"spec": {}}}}}
                for n, r, p in rjs
            ],
            **spec,
        },
    }
    if scheduling is not None:
        out["spec"]["scheduling"] = scheduling
    return out


def pods_and_lookup(*objs: dict, extra: tuple = ()) -> tuple[list[dict], ListLookup]:
    owners, pods = [], []
    for o in objs:
        a, b = expand(o)
        owners += a
        pods += b
    return pods, ListLookup([*objs, *owners, *pods, *extra])


# suspend / resume


def test_suspended_jobset_with_scheduling_has_no_groups_and_its_pods_wait():
    js = seed("gang-suspend.yaml")
    running_names = [g.name for g in groups_for_workload(js, ListLookup([js]))]
    suspended = copy.deepcopy(js)
    suspended["spec"]["suspend"] = True
    assert groups_for_workload(suspended, ListLookup([suspended])) == []
    assert podgroup_objects([suspended]) == []
    pods, _ = pods_and_lookup(js)
    m = derive_membership(pods[0], ListLookup([suspended, *pods]))
    assert m.state is MembershipState.GROUP_MISSING
    resumed = copy.deepcopy(suspended)
    resumed["spec"]["suspend"] = False
    assert [g.name for g in groups_for_workload(resumed, ListLookup([resumed]))] == running_names


# elastic scaling


def test_elastic_scale_keeps_names_and_moves_the_derived_min_count():
    before = compile_jobset(seed("gang-elastic.yaml"))
    after = compile_jobset(seed("gang-elastic-scale-patch.yaml"))
    assert [pg["metadata"]["name"] for pg in before.podgroups] == [
        pg["metadata"]["name"] for pg in after.podgroups
    ]
    assert [g.min_member for g in before.groups] == [2]
    assert [g.min_member for g in after.groups] == [4]


def test_explicit_job_level_min_count_stays_fixed_when_parallelism_scales():
    sched = {
        "replicatedJobs": [
            {"targetReplicatedJobs": ["w"], "job": {"schedulingPolicy": {"gang": {"minCount": 2}}}}
        ]
    }
    small = compile_jobset(jobset([("w", 2, 2)], sched))
    big = compile_jobset(jobset([("w", 2, 4)], sched))
    assert [g.min_member for g in small.groups] == [2, 2]
    assert [g.min_member for g in big.groups] == [2, 2]
    unset = {"replicatedJobs": [{"targetReplicatedJobs": ["w"], "job": {"schedulingPolicy": {"gang": {}}}}]}
    assert [g.min_member for g in compile_jobset(jobset([("w", 2, 4)], unset)).groups] == [4, 4]


# sequenced startup


@pytest.mark.parametrize(
    "spec",
    [
        {"startupPolicy": {"startupPolicyOrder": "InOrder"}},
        {"_depends": True},
    ],
    ids=["InOrder startup gives one gang per replicatedJob", "dependsOn gives one gang per replicatedJob"],
)
def test_sequenced_startup_gives_one_group_per_replicated_job(spec):
    js = jobset(
        [("leader", 1, 1), ("worker", 2, 3)], {}, **{k: v for k, v in spec.items() if k != "_depends"}
    )
    if spec.get("_depends"):
        js["spec"]["replicatedJobs"][1]["dependsOn"] = [{"name": "leader", "status": "Ready"}]
    c = compile_jobset(js)
    assert [g.min_member for g in c.groups] == [1, 6]
    assert c.group_of("leader", 0) != c.group_of("worker", 1)
    assert c.group_of("worker", 0) == c.group_of("worker", 1)


def test_explicit_top_level_gang_with_sequenced_startup_is_rejected():
    js = jobset(
        [("a", 1, 1), ("b", 1, 1)],
        {"schedulingPolicy": {"gang": {}}},
        startupPolicy={"startupPolicyOrder": "InOrder"},
    )
    with pytest.raises(GroupingError) as err:
        compile_jobset(js)
    assert err.value.field == "spec.scheduling.schedulingPolicy.gang"


def test_top_level_basic_policy_is_one_basic_group():
    (g,) = compile_jobset(jobset([("a", 2, 2)], {"schedulingPolicy": {"basic": {}}})).groups
    assert g.policy is Policy.BASIC and not g.is_gang()


# invalid spec.scheduling names the field

INVALID = [
    (
        "top-level fields together with replicatedJobs",
        {"schedulingPolicy": {"gang": {}}, "replicatedJobs": [{"targetReplicatedJobs": ["a", "b"]}]},
        "spec.scheduling.schedulingPolicy",
    ),
    (
        "a replicatedJob nobody targets",
        {"replicatedJobs": [{"targetReplicatedJobs": ["a"]}]},
        "spec.scheduling.replicatedJobs",
    ),
    (
        "an unknown target",
        {"replicatedJobs": [{"targetReplicatedJobs": ["a"]}, {"targetReplicatedJobs": ["nope"]}]},
        "spec.scheduling.replicatedJobs[1].targetReplicatedJobs[0]",
    ),
    (
        "a replicatedJob targeted twice",
        {"replicatedJobs": [{"targetReplicatedJobs": ["a", "b"]}, {"targetReplicatedJobs": ["b"]}]},
        "spec.scheduling.replicatedJobs[1].targetReplicatedJobs[0]",
    ),
    (
        "job with two targets",
        {"replicatedJobs": [{"targetReplicatedJobs": ["a", "b"], "job": {}}]},
        "spec.scheduling.replicatedJobs[0].targetReplicatedJobs",
    ),
    (
        "job together with an entry-level policy",
        {
            "replicatedJobs": [
                {"targetReplicatedJobs": ["a"], "job": {}, "schedulingPolicy": {"gang": {}}},
                {"targetReplicatedJobs": ["b"]},
            ]
        },
        "spec.scheduling.replicatedJobs[0].schedulingPolicy",
    ),
    (
        "a job-level minCount above the pods of one Job",
        {
            "replicatedJobs": [
                {"targetReplicatedJobs": ["a"], "job": {"schedulingPolicy": {"gang": {"minCount": 99}}}},
                {"targetReplicatedJobs": ["b"]},
            ]
        },
        "spec.scheduling.replicatedJobs[0].job.schedulingPolicy.gang.minCount",
    ),
    (
        "both basic and gang",
        {"schedulingPolicy": {"gang": {}, "basic": {}}},
        "spec.scheduling.schedulingPolicy",
    ),
    (
        "two topology constraints",
        {"schedulingConstraints": {"topology": [{"key": "x"}, {"key": "y"}]}},
        "spec.scheduling.schedulingConstraints.topology",
    ),
    (
        "a disruption mode with neither single nor all",
        {"disruptionMode": {}},
        "spec.scheduling.disruptionMode",
    ),
    (
        "a claim with both a name and a template",
        {
            "replicatedJobs": [
                {
                    "targetReplicatedJobs": ["a", "b"],
                    "resourceClaims": [
                        {"name": "c", "resourceClaimName": "x", "resourceClaimTemplateName": "y"}
                    ],
                }
            ]
        },
        "spec.scheduling.replicatedJobs[0].resourceClaims[0]",
    ),
    (
        "more PodGroups than a Workload holds",
        {"replicatedJobs": [{"targetReplicatedJobs": ["a"], "job": {}}, {"targetReplicatedJobs": ["b"]}]},
        "spec.scheduling.replicatedJobs[0].job",
    ),
]


@pytest.mark.parametrize(("_what", "sched", "field"), INVALID, ids=[f"rejects {c[0]}" for c in INVALID])
def test_invalid_scheduling_is_rejected_naming_the_field(_what, sched, field):
    replicas_a = 9 if _what.startswith("more PodGroups") else 1
    js = jobset([("a", replicas_a, 1), ("b", 1, 2)], sched)
    with pytest.raises(GroupingError) as err:
        compile_jobset(js)
    assert err.value.field == field
    assert str(err.value).startswith(field)
    with pytest.raises(GroupingError):
        podgroup_objects([js])
    pods, lookup = pods_and_lookup(js)
    m = derive_membership(pods[0], lookup)
    assert m.state is MembershipState.INVALID and field in m.message


# KAI batch-min-member


def kai_job(parallelism: int, min_member: str | None, completions: int | None = None) -> dict:
    anns = {keys.BATCH_MIN_MEMBER: min_member} if min_member is not None else {}
    spec = {"parallelism": parallelism, "template": {"spec": {}}}
    if completions is not None:
        spec["completions"] = completions
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ml", "annotations": anns},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("parallelism", "completions", "annotation", "want"),
    [
        (6, None, None, 1),
        (6, None, "2", 2),
        (3, None, "10", 3),
        (6, 2, "5", 2),
    ],
    ids=[
        "a Job without the annotation is not a gang",
        "the annotation sets the quorum",
        "a quorum above parallelism is clamped to parallelism",
        "a quorum above completions is clamped to completions",
    ],
)
def test_batch_job_min_member(parallelism, completions, annotation, want):
    job = kai_job(parallelism, annotation, completions)
    (g,) = groups_for_workload(job, ListLookup([job]))
    assert g.min_member == want and g.source is Source.KAI_DERIVED


@pytest.mark.parametrize("bad", ["two", "0", "-1", ""], ids=lambda b: f"batch-min-member {b!r} is invalid")
def test_bad_batch_min_member_names_the_annotation(bad):
    job = kai_job(4, bad)
    with pytest.raises(GroupingError) as err:
        groups_for_workload(job, ListLookup([job]))
    assert keys.BATCH_MIN_MEMBER in err.value.field
    pods, lookup = pods_and_lookup(job)
    assert derive_membership(pods[0], lookup).state is MembershipState.INVALID


@pytest.mark.parametrize(
    ("annotation", "startup", "want"),
    [(None, None, 3), ("2", None, 2), ("7", None, 3), (None, "InOrder", 1), ("2", "InOrder", 2)],
    ids=[
        "AnyOrder needs every replicatedJob",
        "the JobSet annotation sets root minSubGroup",
        "an annotation above the replicatedJob count is clamped",
        "InOrder needs one replicatedJob",
        "the annotation wins over InOrder",
    ],
)
def test_kai_jobset_root_min_subgroup(annotation, startup, want):
    js = jobset([("a", 1, 1), ("b", 2, 2), ("c", 1, 4)])
    if annotation:
        js["metadata"]["annotations"] = {keys.BATCH_MIN_MEMBER: annotation}
    if startup:
        js["spec"]["startupPolicy"] = {"startupPolicyOrder": startup}
    (g,) = groups_for_workload(js, ListLookup([js]))
    assert g.min_subgroup == want
    assert g.subgroup("b").min_subgroup == 2
    assert g.subgroup("c-replica-0").min_member == 4


def test_pytorch_elastic_and_min_available():
    job = yaml.safe_load((SEED_DIR / "pytorch-job.yaml").read_text())
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 4
    job["spec"]["elasticPolicy"] = {"minReplicas": 3}
    (g,) = groups_for_workload(job, ListLookup([job]))
    assert (g.min_member, g.subgroup("worker").min_member) == (3, 2)
    job["spec"]["runPolicy"] = {"schedulingPolicy": {"minAvailable": 2}}
    (g,) = groups_for_workload(job, ListLookup([job]))
    assert (g.min_member, g.subgroup("master").min_member, g.subgroup("worker").min_member) == (2, 1, 1)


# owner chains


def _waits_for(m, owner: str) -> bool:
    return (
        m.state is MembershipState.GROUP_MISSING and f"waiting for its owner {owner} to be seen" in m.message
    )


def test_pod_whose_jobset_cannot_be_read_waits_for_it():
    # its Job is read, the JobSet above it is not: falling back to the Job would make a gang of one
    # replica out of a JobSet's (or, deleted, of pods the garbage collector is taking)
    js = seed("no-sched-baseline.yaml")
    owners, pods = expand(js)
    m = derive_membership(pods[0], ListLookup([*owners, *pods]))  # the JobSet is not readable
    assert _waits_for(m, "JobSet default/no-sched-baseline"), m


def test_pod_whose_job_is_missing_waits_for_it():
    # not seen yet (its watch event came first), or deleted: placed as a pod of its own it could be a
    # gang's member bound before its quorum
    job = kai_job(2, "2")
    _, pods = expand(job)
    m = derive_membership(pods[0], ListLookup(pods))
    assert _waits_for(m, f"Job ml/{job['metadata']['name']}"), m
    assert not is_single_pod(pods[0], ListLookup(pods))


def test_a_pod_naming_a_podgroup_stays_in_it_when_its_job_cannot_be_read():
    # KAI's scheduler keeps a pod in the PodGroup it names; its podgrouper cannot rewrite what it cannot
    # read (a Job deleted in the background, its pods still running until the garbage collector's turn)
    objs = external()
    job = next(o for o in objs if o["kind"] == "Job")
    podgroups = [o for o in objs if o["kind"] == "PodGroup"]
    _, pods = expand(job)
    m = derive_membership(pods[0], ListLookup([*podgroups, *pods]))
    assert m.state is MembershipState.MEMBER and m.group.name == podgroups[0]["metadata"]["name"], m


def test_owner_recreated_under_another_uid_ends_the_walk():
    job = kai_job(2, "2")
    job["metadata"]["uid"] = "old"
    _, pods = expand(job)
    job["metadata"]["uid"] = "new"
    assert _waits_for(
        derive_membership(pods[0], ListLookup([job, *pods])), f"Job ml/{job['metadata']['name']}"
    )


def test_a_pod_of_an_owner_kind_that_makes_no_gang_is_a_group_of_one_read_or_not():
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "controller": True}
            ],
        },
        "spec": {},
    }
    assert is_single_pod(pod, ListLookup([]))
    assert derive_membership(pod, ListLookup([])).group.source is Source.SINGLE_POD


def test_plain_pod_is_a_group_of_one():
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}, "spec": {}}
    m = derive_membership(pod, ListLookup([]))
    assert (m.state, m.group.key, m.group.min_member, m.group.is_gang()) == (
        MembershipState.MEMBER,
        "ns/pod:p",  # never a PodGroup's key: a pod may share a name with one, in no gang
        1,
        False,
    )


@pytest.mark.parametrize(
    "pod",
    [{}, {"metadata": None}, {"metadata": {"ownerReferences": "x"}}, {"spec": {"schedulingGroup": "x"}}],
    ids=["an empty pod", "null metadata", "malformed owner references", "malformed schedulingGroup"],
)
def test_malformed_pods_never_raise(pod):
    m = derive_membership(pod, ListLookup([]))
    assert m.state in (MembershipState.MEMBER, MembershipState.INVALID)


# external KAI PodGroups


def external(subgroups=None) -> list[dict]:
    objs = [d for d in yaml.safe_load_all((SEED_DIR / "external-podgroup-job.yaml").read_text()) if d]
    if subgroups is not None:
        objs[0]["spec"]["subGroups"] = subgroups
    return objs


def test_external_podgroup_missing_means_wait_silently():
    _pg, job = external()
    pods, lookup = pods_and_lookup(job)
    m = derive_membership(pods[0], lookup)
    assert m.state is MembershipState.GROUP_MISSING


def test_pod_naming_an_unknown_subgroup_is_rejected_with_kais_message():
    pg, job = external()
    job["spec"]["template"]["metadata"]["labels"][keys.SUBGROUP_NAME] = "evaluators"
    pods, lookup = pods_and_lookup(job, extra=(pg,))
    m = derive_membership(pods[0], lookup)
    assert m.state is MembershipState.INVALID_SUBGROUP
    assert (
        m.message
        == 'Pod references subgroup "evaluators", which does not exist in PodGroup default/external-batch-job'
    )


def test_external_podgroup_queue_is_authoritative():
    pg, job = external()
    job["spec"]["template"]["metadata"]["labels"][keys.QUEUE] = "other"
    pg["spec"]["queue"] = "team-a"
    pods, lookup = pods_and_lookup(job, extra=(pg,))
    assert derive_membership(pods[0], lookup).group.queue == "team-a"


def test_skip_podgrouper_on_a_grand_owner_selects_the_external_group():
    js = jobset([("w", 1, 2)])
    js["metadata"]["annotations"] = {keys.SKIP_PODGROUPER: "true"}
    js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"] = {
        "annotations": {keys.POD_GROUP_NAME: "shared"}
    }
    pg = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "shared", "namespace": "ml"},
        "spec": {"minMember": 2, "queue": "q"},
    }
    pods, lookup = pods_and_lookup(js, extra=(pg,))
    m = derive_membership(pods[0], lookup)
    assert (m.state, m.group.key, m.group.source) == (
        MembershipState.MEMBER,
        "ml/shared",
        Source.KAI_PODGROUP,
    )
    assert groups_for_workload(js, lookup) == []


def test_ownerless_pod_with_pod_group_name_joins_that_group():
    pg = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "ml"},
        "spec": {"minMember": 3},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml", "annotations": {keys.POD_GROUP_NAME: "g"}},
        "spec": {},
    }
    m = derive_membership(pod, ListLookup([pg]))
    assert (m.group.key, m.group.min_member) == ("ml/g", 3)


# scheduling.k8s.io PodGroups


def k8s_pod(pg_name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {"schedulingGroup": {"podGroupName": pg_name}},
    }


PODGROUP_SHAPES = [
    (
        "v1alpha2 with podGroupTemplateRef and a string disruption mode",
        {
            "apiVersion": "scheduling.k8s.io/v1alpha2",
            "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": "ml"},
            "spec": {
                "podGroupTemplateRef": {"workload": {"workloadName": "w", "podGroupTemplateName": "t"}},
                "schedulingPolicy": {"gang": {"minCount": 4}},
                "disruptionMode": "PodGroup",
                "schedulingConstraints": {"topology": [{"key": "rack"}]},
            },
        },
        (Policy.GANG, 4, Disruption.ALL, "rack"),
    ),
    (
        "v1alpha2 as kube 1.36 reads it back (null constraints, defaulted mode and priority)",
        {
            "apiVersion": "scheduling.k8s.io/v1alpha2",
            "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": "ml"},
            "spec": {
                "podGroupTemplateRef": {"workload": {"workloadName": "w2", "podGroupTemplateName": "t"}},
                "schedulingPolicy": {"gang": {"minCount": 5}},
                "disruptionMode": "Pod",
                "priority": 0,
                "schedulingConstraints": None,
            },
        },
        (Policy.GANG, 5, Disruption.SINGLE, None),
    ),
    (
        "v1alpha2 without its own policy, falling back to a v1alpha2 Workload template",
        {
            "apiVersion": "scheduling.k8s.io/v1alpha2",
            "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": "ml"},
            "spec": {
                "podGroupTemplateRef": {"workload": {"workloadName": "w2", "podGroupTemplateName": "t"}}
            },
        },
        (Policy.GANG, 6, Disruption.ALL, "block"),
    ),
    (
        "v1alpha3 with workloadRef and a union disruption mode",
        {
            "apiVersion": "scheduling.k8s.io/v1alpha3",
            "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": "ml"},
            "spec": {
                "workloadRef": {"workloadName": "w", "templateName": "t"},
                "schedulingPolicy": {"gang": {"minCount": 8}},
                "disruptionMode": {"single": {}},
            },
        },
        (Policy.GANG, 8, Disruption.SINGLE, None),
    ),
    (
        "v1beta1 basic",
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": "ml"},
            "spec": {"schedulingPolicy": {"basic": {}}},
        },
        (Policy.BASIC, None, Disruption.SINGLE, None),
    ),
    (
        "v1beta1 whose policy lives in the Workload template",
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "pg", "namespace": "ml"},
            "spec": {"workloadRef": {"workloadName": "w", "templateName": "t"}},
        },
        (Policy.GANG, 3, Disruption.ALL, "zone"),
    ),
]


@pytest.mark.parametrize(
    ("_shape", "pg", "want"), PODGROUP_SHAPES, ids=[f"reads a {c[0]}" for c in PODGROUP_SHAPES]
)
def test_scheduling_k8s_podgroup_shapes(_shape, pg, want):
    workload = {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "ml"},
        "spec": {
            "podGroupTemplates": [
                {
                    "name": "t",
                    "schedulingPolicy": {"gang": {"minCount": 3}},
                    "disruptionMode": {"all": {}},
                    "schedulingConstraints": {"topology": [{"key": "zone"}]},
                }
            ]
        },
    }
    workload_v1alpha2 = {  # kube 1.36's shape: a string disruption mode
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "Workload",
        "metadata": {"name": "w2", "namespace": "ml"},
        "spec": {
            "podGroupTemplates": [
                {
                    "name": "t",
                    "schedulingPolicy": {"gang": {"minCount": 6}},
                    "disruptionMode": "PodGroup",
                    "schedulingConstraints": {"topology": [{"key": "block"}]},
                }
            ]
        },
    }
    m = derive_membership(k8s_pod("pg"), ListLookup([pg, workload, workload_v1alpha2]))
    g = m.group
    assert m.state is MembershipState.MEMBER and g.source is Source.K8S_PODGROUP and g.key == "ml/pg"
    assert (g.policy, g.min_member, g.disruption, g.topology.required_level if g.topology else None) == want


def test_missing_scheduling_k8s_podgroup_means_wait():
    assert derive_membership(k8s_pod("nope"), ListLookup([])).state is MembershipState.GROUP_MISSING


def test_jobset_pod_before_its_podgroup_exists_uses_the_compiled_group():
    js = seed("per-rj-independent.yaml")
    pods, lookup = pods_and_lookup(js)
    worker = next(p for p in pods if p["metadata"]["labels"][keys.REPLICATED_JOB_NAME] == "worker")
    m = derive_membership(worker, lookup)
    assert (m.state, m.group.name, m.group.source) == (
        MembershipState.MEMBER,
        "per-rj-independent-worker-6cf5bd766e",
        Source.JOBSET_SCHEDULING,
    )


@pytest.mark.parametrize(
    "sched",
    [
        {"schedulingPolicy": {"gang": {"minCount": 2}}},
        {
            "replicatedJobs": [
                {"targetReplicatedJobs": ["a", "b"], "schedulingPolicy": {"gang": {"minCount": 2}}}
            ]
        },
    ],
    ids=["at the top level", "in a replicatedJobs entry"],
)
def test_a_min_count_outside_job_is_derived_from_the_live_pods_as_the_controller_does(sched):
    # the controller's composite policy has no count of its own: it follows parallelism x replicas
    js = jobset([("a", 1, 1), ("b", 1, 2)], sched)
    (group,) = compile_jobset(js).groups
    assert group.min_member == 3
    js["spec"]["replicatedJobs"][1]["template"]["spec"]["parallelism"] = 4
    (scaled,) = compile_jobset(js).groups
    assert scaled.min_member == 5


def test_a_whole_jobset_gang_needs_one_priority_class():
    js = jobset([("a", 1, 1), ("b", 1, 2)], {"schedulingPolicy": {"gang": {}}})
    js["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["priorityClassName"] = "high"
    with pytest.raises(GroupingError) as err:
        compile_jobset(js)
    assert err.value.field == "spec.replicatedJobs[1].template.spec.template.spec.priorityClassName"


def test_a_gang_of_gangs_with_millions_of_replicas_is_rejected_before_it_is_built():
    js = jobset([("a", 10**7, 1)], {"replicatedJobs": [{"targetReplicatedJobs": ["a"], "job": {}}]})
    with pytest.raises(GroupingError, match="at most 8"):
        compile_jobset(js)


# scaled to zero: kube-apiserver 1.36 refuses a gang minCount of 0 (tests/e2e/test_e2e_workload_api.py),
# and a gang with no pods has nothing to hold together


@pytest.mark.parametrize(
    ("_what", "rjs", "sched", "want_groups"),
    [
        ("the whole JobSet scaled to zero", [("w", 0, 4)], {}, []),
        ("parallelism zero", [("w", 2, 0)], {}, []),
        (
            "one of two entries scaled to zero",
            [("driver", 1, 1), ("w", 0, 4)],
            {"replicatedJobs": [{"targetReplicatedJobs": ["driver"]}, {"targetReplicatedJobs": ["w"]}]},
            [1],
        ),
        (
            "per-Job gangs of a replicatedJob with zero replicas",
            [("driver", 1, 2), ("w", 0, 4)],
            {
                "replicatedJobs": [
                    {"targetReplicatedJobs": ["driver"]},
                    {"targetReplicatedJobs": ["w"], "job": {"schedulingPolicy": {"gang": {}}}},
                ]
            },
            [2],
        ),
    ],
)
def test_a_gang_with_no_pods_compiles_to_no_podgroup(_what, rjs, sched, want_groups):
    out = compile_jobset(jobset(rjs, sched))
    assert [g.min_member for g in out.groups] == want_groups
    min_counts = [pg["spec"]["schedulingPolicy"]["gang"]["minCount"] for pg in out.podgroups]
    assert min_counts == want_groups
    if out.workload is None:
        assert want_groups == []
    else:
        templates = out.workload["spec"]["podGroupTemplates"]
        assert [t["schedulingPolicy"]["gang"]["minCount"] for t in templates] == want_groups


def test_a_basic_group_with_no_pods_is_kept():
    out = compile_jobset(jobset([("w", 0, 4)], {"schedulingPolicy": {"basic": {}}}))
    assert [g.policy for g in out.groups] == [Policy.BASIC]


# Jobs on the Workload API (1.37, WorkloadWithJob): the Job controller makes a Workload and a PodGroup
# for every new root Job (basic unless `spec.scheduling` says gang), and for a child Job whose parent
# delegates with `scheduling.k8s.io/group-template-name`; it names the PodGroup on each pod it creates.


def wlj_job(*, scheduling=None, annotations=None, owner=None) -> dict:
    meta = {"name": "train", "namespace": "ml", "uid": "job-uid", "annotations": dict(annotations or {})}
    if owner:
        meta["ownerReferences"] = [{**owner, "controller": True}]
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {"parallelism": 4, "completions": 4},
    }
    job["spec"]["template"] = {"spec": {"containers": [{"name": "c"}]}}
    if scheduling is not None:
        job["spec"]["scheduling"] = scheduling
    return job


def wlj_podgroup(policy: dict, *, controller: str = "Job") -> dict:
    """A PodGroup as 1.37.2's Job controller writes it (controller ownerRef to the Job)."""
    ref = {
        "apiVersion": "batch/v1",
        "kind": controller,
        "name": "train",
        "uid": "job-uid",
        "controller": True,
    }
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "train-pg", "namespace": "ml", "ownerReferences": [ref]},
        "spec": {
            "workloadRef": {"workloadName": "train-wl", "templateName": "train"},
            "schedulingPolicy": policy,
        },
    }


def wlj_pod() -> dict:
    owners = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "job-uid", "controller": True},
        {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "name": "train-pg", "uid": "pg-uid"},
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train-0", "namespace": "ml", "ownerReferences": owners},
        "spec": {"schedulingGroup": {"podGroupName": "train-pg"}},
    }


GANG4 = {"gang": {"minCount": 4}}
JOBSET_OWNER = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js", "uid": "js-uid"}


@pytest.mark.parametrize(
    ("job", "policy", "want"),
    [
        # the controller's default for a Job that asked for nothing: KAI's annotation keeps its gang
        (wlj_job(annotations={keys.BATCH_MIN_MEMBER: "3"}), {"basic": {}}, (Source.KAI_DERIVED, 3)),
        (wlj_job(), {"basic": {}}, (Source.KAI_DERIVED, 1)),
        # what the Job asked for, on the Workload API
        (wlj_job(scheduling={"schedulingPolicy": GANG4}), GANG4, (Source.K8S_PODGROUP, 4)),
        (wlj_job(scheduling={"schedulingPolicy": {"basic": {}}}), {"basic": {}}, (Source.K8S_PODGROUP, None)),
        (
            wlj_job(scheduling={"schedulingPolicy": GANG4}, annotations={keys.BATCH_MIN_MEMBER: "2"}),
            GANG4,
            (Source.K8S_PODGROUP, 4),
        ),
        # a child Job whose parent delegated its PodGroup (the policy is the parent Workload's template)
        (
            wlj_job(annotations={keys.GROUP_TEMPLATE_NAME: "workers"}, owner=JOBSET_OWNER),
            GANG4,
            (Source.K8S_PODGROUP, 4),
        ),
        (
            wlj_job(annotations={keys.GROUP_TEMPLATE_NAME: "workers"}, owner=JOBSET_OWNER),
            {"basic": {}},
            (Source.K8S_PODGROUP, None),
        ),
    ],
    ids=[
        "default basic, batch-min-member 3",
        "default basic, plain Job",
        "spec.scheduling gang",
        "spec.scheduling basic",
        "spec.scheduling gang over batch-min-member",
        "delegated gang",
        "delegated basic",
    ],
)
def test_a_job_controller_podgroup_groups_as_the_job_asked(job: dict, policy: dict, want: tuple) -> None:
    pg = wlj_podgroup(policy)
    m = derive_membership(wlj_pod(), ListLookup([job, pg]))
    assert m.state is MembershipState.MEMBER, m.message
    assert (m.group.source, m.group.min_member) == want


def _ownerless(pg: dict) -> dict:
    pg["metadata"].pop("ownerReferences")
    return pg


@pytest.mark.parametrize(
    "pg",
    [wlj_podgroup({"basic": {}}, controller="LeaderWorkerSet"), _ownerless(wlj_podgroup({"basic": {}}))],
    ids=["another controller's", "nobody's"],
)
def test_a_basic_podgroup_not_the_job_controllers_default_is_the_pods_group(pg: dict) -> None:
    """Only the Job controller's own default falls through to KAI's rules."""
    job = wlj_job(annotations={keys.BATCH_MIN_MEMBER: "3"})
    m = derive_membership(wlj_pod(), ListLookup([job, pg]))
    assert (m.group.source, m.group.key) == (Source.K8S_PODGROUP, "ml/train-pg")


@pytest.mark.parametrize(
    ("job", "derived"),
    [
        (wlj_job(), True),
        (wlj_job(scheduling={"schedulingPolicy": GANG4}), False),
        (wlj_job(annotations={keys.GROUP_TEMPLATE_NAME: "workers"}, owner=JOBSET_OWNER), False),
    ],
    ids=["plain Job", "spec.scheduling", "delegated"],
)
def test_no_kai_podgroup_is_derived_for_a_job_on_the_workload_api(job: dict, derived: bool) -> None:
    groups = groups_for_workload(job, ListLookup([job]))
    assert bool(groups) is derived and all(g.source is Source.KAI_DERIVED for g in groups)


# an owner of a workload kind not in the lookup (found by review of the rule above)


class WithoutKind(ListLookup):
    """A lookup that does not list one kind at all (its API not served when the source started)."""

    def __init__(self, objects: list[dict], unlisted: tuple[str, str]) -> None:
        super().__init__(objects)
        self.unlisted = unlisted

    def lists(self, group: str, kind: str) -> bool:
        return (group, kind) != self.unlisted


@pytest.mark.parametrize(
    ("policy", "waits"),
    [({"basic": {}}, True), (GANG4, False)],
    ids=["the Job controller's basic PodGroup: the Job decides, it waits", "a gang PodGroup decides alone"],
)
def test_a_137_pod_whose_job_is_missing_waits_only_where_the_job_decides(policy, waits):
    job = wlj_job(annotations={keys.BATCH_MIN_MEMBER: "3"})
    pg = wlj_podgroup(policy)
    assert derive_membership(wlj_pod(), ListLookup([job, pg])).state is MembershipState.MEMBER
    m = derive_membership(wlj_pod(), ListLookup([pg]))
    assert _waits_for(m, "Job ml/train") == waits, m
    if not waits:
        assert m.state is MembershipState.MEMBER and m.group.min_member == 4


def test_a_jobset_pod_whose_job_is_missing_waits_rather_than_refused_its_jobsets_podgroup():
    js = jobset([("w", 1, 2)])
    pods, _ = pods_and_lookup(js)
    owners, _ = expand(js)
    pg = kai.podgroup_object(kai.derive_group(js, owners=(), pod=None), top=js)
    pod = pods[0]
    pod["metadata"].setdefault("annotations", {})[keys.POD_GROUP_NAME] = pg["metadata"]["name"]
    assert derive_membership(pod, ListLookup([js, *owners, pg, pod])).state is MembershipState.MEMBER
    m = derive_membership(pod, ListLookup([js, pg, pod]))  # its Job not seen yet
    assert m.state is MembershipState.GROUP_MISSING and "waiting for its owner Job ml/" in m.message, m


def test_a_pod_whose_jobset_kind_is_not_listed_is_grouped_by_its_job_as_before():
    # jobsets not served when the service started (the CRDs installed later): the JobSet's absence says
    # nothing, and its pods are grouped by the Job above them rather than wait for good
    js = seed("no-sched-baseline.yaml")
    owners, pods = expand(js)
    m = derive_membership(pods[0], WithoutKind([*owners, *pods], kai.JOBSET))
    assert m.state is MembershipState.MEMBER
    assert m.group.name.startswith("pg-no-sched-baseline-workers-0-")
