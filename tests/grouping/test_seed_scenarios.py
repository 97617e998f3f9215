"""Every example manifest of both seed documents yields exactly the groups its document describes,
and every pod its controllers would create joins exactly one leaf of them."""

from __future__ import annotations

import collections
import pathlib

import pytest
import yaml

from extender.grouping import ListLookup, derive_membership, groups_for_workload, podgroup_objects
from extender.grouping.jobset_scheduling import has_scheduling, is_suspended
from extender.grouping.membership import k8s_group
from extender.model.group import Disruption, MembershipState, Policy, ResourceClaimRef, Source, SubGroup
from extender.model.group import TopologyConstraint as Topo
from extender.model.keys import object_uid
from tests.grouping.workloads import expand

SEED_DIR = pathlib.Path(__file__).resolve().parents[2] / "extender" / "scenarios" / "seed"
RACK = "topology.kubernetes.io/rack"


def load(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((SEED_DIR / name).read_text()) if d]


def workload_of(objs: list[dict]) -> dict:
    return next(o for o in objs if o["kind"] in ("Job", "JobSet", "PyTorchJob"))


def kai_name(obj: dict) -> str:
    return f"pg-{obj['metadata']['name']}-{object_uid(obj)}"


# (file, expected groups as {name: fields}, expected pods per (group name, leaf))
GANG = {"policy": Policy.GANG}
CASES = [
    (
        "batch-job.yaml",
        {"@kai": {**GANG, "min_member": 1, "queue": "default-queue", "source": Source.KAI_DERIVED}},
        {("@kai", None): 2},
    ),
    (
        "batch-job-min-member.yaml",
        {"@kai": {**GANG, "min_member": 2, "queue": "default-queue", "source": Source.KAI_DERIVED}},
        {("@kai", None): 6},
    ),
    (
        "external-podgroup-job.yaml",
        {
            "external-batch-job": {
                **GANG,
                "min_member": 2,
                "queue": "default-queue",
                "source": Source.KAI_PODGROUP,
                "subgroups": (SubGroup("workers", min_member=2),),
            }
        },
        {("external-batch-job", "workers"): 2},
    ),
    (
        "pytorch-job.yaml",
        {
            "@kai": {
                **GANG,
                "min_member": 3,
                "queue": "default-queue",
                "subgroups": (SubGroup("master", min_member=1), SubGroup("worker", min_member=2)),
            }
        },
        {("@kai", "master"): 1, ("@kai", "worker"): 2},
    ),
    (
        "kai-jobset-topology.yaml",
        {
            "@kai": {
                **GANG,
                "min_subgroup": 1,
                "topology": Topo("cluster-topology", required_level="block"),
                "subgroups": (
                    SubGroup("coordinator", min_subgroup=1),
                    SubGroup("coordinator-replica-0", parent="coordinator", min_member=1),
                    SubGroup("worker", min_subgroup=2),
                    SubGroup(
                        "worker-replica-0",
                        parent="worker",
                        min_member=2,
                        topology=Topo("cluster-topology", required_level="rack"),
                    ),
                    SubGroup(
                        "worker-replica-1",
                        parent="worker",
                        min_member=2,
                        topology=Topo("cluster-topology", required_level="rack"),
                    ),
                ),
            }
        },
        {
            ("@kai", "coordinator-replica-0"): 1,
            ("@kai", "worker-replica-0"): 3,
            ("@kai", "worker-replica-1"): 3,
        },
    ),
    (
        "no-sched-baseline.yaml",
        {
            "@kai": {
                **GANG,
                "min_subgroup": 1,
                "subgroups": (
                    SubGroup("workers", min_subgroup=2),
                    SubGroup("workers-replica-0", parent="workers", min_member=1),
                    SubGroup("workers-replica-1", parent="workers", min_member=1),
                ),
            }
        },
        {("@kai", "workers-replica-0"): 1, ("@kai", "workers-replica-1"): 1},
    ),
    (
        "gang-training.yaml",
        {"gang-training-536cd048a7": {**GANG, "min_member": 5, "disruption": Disruption.ALL}},
        {("gang-training-536cd048a7", None): 5},
    ),
    (
        "single-gang.yaml",
        {"single-gang-994469711d": {**GANG, "min_member": 8, "disruption": Disruption.SINGLE}},
        {("single-gang-994469711d", None): 8},
    ),
    (
        "per-rj-independent.yaml",
        {
            "per-rj-independent-launcher-96579e4a53": {**GANG, "min_member": 1},
            "per-rj-independent-worker-6cf5bd766e": {**GANG, "min_member": 4},
        },
        {
            ("per-rj-independent-launcher-96579e4a53", None): 1,
            ("per-rj-independent-worker-6cf5bd766e", None): 4,
        },
    ),
    (
        "per-rj-grouped.yaml",
        {
            "per-rj-grouped-launcher-worker-6dcbea6951": {
                **GANG,
                "min_member": 5,
                "disruption": Disruption.ALL,
            }
        },
        {("per-rj-grouped-launcher-worker-6dcbea6951", None): 5},
    ),
    (
        "per-ij-job-independent.yaml",
        {
            "per-ij-job-independent-launcher-bef3c39297": {**GANG, "min_member": 1},
            "per-ij-job-independent-worker-0-b0a96b1491": {
                **GANG,
                "min_member": 2,
                "disruption": Disruption.ALL,
            },
            "per-ij-job-independent-worker-1-88962d4b0e": {
                **GANG,
                "min_member": 2,
                "disruption": Disruption.ALL,
            },
        },
        {
            ("per-ij-job-independent-launcher-bef3c39297", None): 1,
            ("per-ij-job-independent-worker-0-b0a96b1491", None): 2,
            ("per-ij-job-independent-worker-1-88962d4b0e", None): 2,
        },
    ),
    (
        "topo-training.yaml",
        {
            "topo-training-driver-c999f02607": {"policy": Policy.BASIC, "min_member": None},
            "topo-training-workers-32768fbfee": {
                **GANG,
                "min_member": 4,
                "topology": Topo(required_level=RACK),
            },
        },
        {("topo-training-driver-c999f02607", None): 1, ("topo-training-workers-32768fbfee", None): 4},
    ),
    (
        "tpu-multislice.yaml",
        {
            "tpu-multislice-c7e8e52e7a": {
                **GANG,
                "min_member": 4,
                "disruption": Disruption.ALL,
                "topology": Topo(required_level="cloud.google.com/gke-tpu-slice"),
            }
        },
        {("tpu-multislice-c7e8e52e7a", None): 4},
    ),
    (
        "sequenced-gang.yaml",
        {
            "sequenced-gang-leader-5e726ba929": {**GANG, "min_member": 1},
            "sequenced-gang-worker-b41461dfcc": {**GANG, "min_member": 2},
        },
        {("sequenced-gang-leader-5e726ba929", None): 1, ("sequenced-gang-worker-b41461dfcc", None): 2},
    ),
    (
        "gang-suspend.yaml",
        {"gang-suspend-8fadf2e74c": {**GANG, "min_member": 2}},
        {("gang-suspend-8fadf2e74c", None): 2},
    ),
    (
        "gang-elastic.yaml",
        {"gang-elastic-e29d4272b0": {**GANG, "min_member": 2, "disruption": Disruption.ALL}},
        {("gang-elastic-e29d4272b0", None): 2},
    ),
    (
        "gang-elastic-scale-patch.yaml",
        {"gang-elastic-e29d4272b0": {**GANG, "min_member": 4, "disruption": Disruption.ALL}},
        {("gang-elastic-e29d4272b0", None): 4},
    ),
    (
        "dra-shared-claim.yaml",
        {
            "dra-shared-claim-worker-0-8f42cf0e6e": {
                **GANG,
                "min_member": 2,
                "resource_claims": (ResourceClaimRef("imex-channel", None, "imex-channel-template"),),
            }
        },
        {("dra-shared-claim-worker-0-8f42cf0e6e", None): 2},
    ),
]


def test_every_seed_file_has_a_case():
    assert {p.name for p in SEED_DIR.glob("*.yaml")} == {c[0] for c in CASES}


@pytest.mark.parametrize(
    ("file", "expected", "_pods"), CASES, ids=[f"{c[0]} yields its documented groups" for c in CASES]
)
def test_seed_workload_yields_exactly_the_documented_groups(file, expected, _pods):
    objs = load(file)
    lookup = ListLookup(objs)
    groups = [g for o in objs for g in groups_for_workload(o, lookup)]
    names = {(kai_name(workload_of(objs)) if n == "@kai" else n): fields for n, fields in expected.items()}
    assert sorted(g.name for g in groups) == sorted(names)
    for group in groups:
        for field, value in names[group.name].items():
            assert getattr(group, field) == value, f"{group.name}.{field}"
        assert group.namespace == "default"


@pytest.mark.parametrize(
    ("file", "_expected", "pods"), CASES, ids=[f"every pod of {c[0]} joins one leaf" for c in CASES]
)
def test_every_seed_pod_joins_the_documented_leaf(file, _expected, pods):
    objs = load(file)
    owners, created = [], []
    for o in objs:
        more_owners, more_pods = expand(o)
        owners += more_owners
        created += more_pods
    lookup = ListLookup(objs + owners + created)
    counts: collections.Counter = collections.Counter()
    for pod in created:
        m = derive_membership(pod, lookup)
        assert m.state is MembershipState.MEMBER, m.message
        counts[(m.group.name, m.subgroup)] += 1
    want = {((kai_name(workload_of(objs)) if n == "@kai" else n), leaf): c for (n, leaf), c in pods.items()}
    assert dict(counts) == want


# (api_version, the PodGroup's reference to its template, the disruption mode "all" in that shape)
SHAPES = [
    (
        "scheduling.k8s.io/v1beta1",
        lambda wl, t: {"workloadRef": {"workloadName": wl, "templateName": t}},
        {"all": {}},
    ),
    (
        "scheduling.k8s.io/v1alpha3",
        lambda wl, t: {"workloadRef": {"workloadName": wl, "templateName": t}},
        {"all": {}},
    ),
    (
        "scheduling.k8s.io/v1alpha2",
        lambda wl, t: {"podGroupTemplateRef": {"workload": {"workloadName": wl, "podGroupTemplateName": t}}},
        "PodGroup",
    ),
]


@pytest.mark.parametrize(("api_version", "ref", "all_mode"), SHAPES, ids=[s[0] for s in SHAPES])
def test_podgroups_for_a_jobset_with_scheduling_are_the_controllers_objects(api_version, ref, all_mode):
    out = podgroup_objects(load("gang-training.yaml"), api_version=api_version)
    assert [o["kind"] for o in out] == ["Workload", "PodGroup"]
    workload, pg = out
    assert workload["apiVersion"] == pg["apiVersion"] == api_version
    assert workload["metadata"]["ownerReferences"][0]["kind"] == "JobSet"
    assert workload["spec"]["podGroupTemplates"] == [
        {
            "name": "gang-training-536cd048a7",
            "schedulingPolicy": {"gang": {"minCount": 5}},
            "disruptionMode": all_mode,
        }
    ]
    assert pg["spec"] == {
        **ref("gang-training-536cd048a7", "gang-training-536cd048a7"),
        "schedulingPolicy": {"gang": {"minCount": 5}},
        "disruptionMode": all_mode,
    }


def test_podgroups_are_printed_in_the_1_37_shape_by_default():
    assert {o["apiVersion"] for o in podgroup_objects(load("gang-training.yaml"))} == {
        "scheduling.k8s.io/v1beta1"
    }


def test_an_unknown_scheduling_api_version_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match=r"v1beta1.*v1alpha3.*v1alpha2.*got 'scheduling\.k8s\.io/v1'"):
        podgroup_objects(load("gang-training.yaml"), api_version="scheduling.k8s.io/v1")


SCHEDULED_JOBSET_CASES = [c for c in CASES if has_scheduling(workload_of(load(c[0])))]
REFERENCE_FIELD = {"scheduling.k8s.io/v1alpha2": "podGroupTemplateRef"}
DISRUPTION_MODES = {
    "scheduling.k8s.io/v1alpha2": ("Pod", "PodGroup"),
}


@pytest.mark.parametrize("api_version", [s[0] for s in SHAPES])
@pytest.mark.parametrize(
    ("file", "expected", "_pods"),
    SCHEDULED_JOBSET_CASES,
    ids=[f"{c[0]} prints PodGroups that read back as its groups" for c in SCHEDULED_JOBSET_CASES],
)
def test_printed_podgroups_are_in_the_asked_shape_and_read_back_as_the_documented_groups(
    file, expected, _pods, api_version
):
    """What `podgroups` prints for a JobSet with spec.scheduling is in the shape of the version asked
    for (v1alpha2 for 1.36, v1beta1/v1alpha3 for 1.37), and each PodGroup alone, without its Workload,
    reads back as the group the table above documents."""
    objs = load(file)
    out = podgroup_objects(objs, api_version=api_version)
    if is_suspended(workload_of(objs)):
        assert out == []
        return
    workload, *pgs = out
    assert workload["kind"] == "Workload" and {pg["kind"] for pg in pgs} == {"PodGroup"}
    assert {o["apiVersion"] for o in out} == {api_version}
    templates = {t["name"]: t for t in workload["spec"]["podGroupTemplates"]}
    assert sorted(pg["metadata"]["name"] for pg in pgs) == sorted(expected)
    ref_field = REFERENCE_FIELD.get(api_version, "workloadRef")
    for pg in pgs:
        spec = pg["spec"]
        # the other versions' reference is an unknown field on this one
        assert {"workloadRef", "podGroupTemplateRef"} & set(spec) == {ref_field}
        if ref_field == "podGroupTemplateRef":
            ref = spec[ref_field]["workload"]
            template_name = ref["podGroupTemplateName"]
        else:
            ref = spec[ref_field]
            template_name = ref["templateName"]
        assert ref["workloadName"] == workload["metadata"]["name"]
        # the PodGroup carries every field of its template (schedulingPolicy is required on it)
        template = templates[template_name]
        assert {k: v for k, v in spec.items() if k != ref_field} == {
            k: v for k, v in template.items() if k != "name"
        }
        for obj in (spec, template):
            mode = obj.get("disruptionMode")
            if api_version in DISRUPTION_MODES:
                assert mode in (None, *DISRUPTION_MODES[api_version])
            else:
                assert mode in (None, {"single": {}}, {"all": {}})
            for policy in obj["schedulingPolicy"].values():
                assert policy == {} or policy["minCount"] >= 1
        group = k8s_group(pg, ListLookup([]))
        assert group.key == f"default/{pg['metadata']['name']}"
        for field, value in expected[pg["metadata"]["name"]].items():
            if field != "source":
                assert getattr(group, field) == value, f"{group.name}.{field}"


def test_podgroups_for_a_kai_jobset_is_one_run_ai_podgroup_with_the_subgroup_tree():
    objs = load("kai-jobset-topology.yaml")
    (pg,) = podgroup_objects(objs)
    assert pg["apiVersion"] == "scheduling.run.ai/v2alpha2"
    assert pg["metadata"]["name"] == kai_name(objs[1])
    assert pg["spec"]["minSubGroup"] == 1
    assert "minMember" not in pg["spec"]
    assert pg["spec"]["subGroups"][3] == {
        "name": "worker-replica-0",
        "parent": "worker",
        "minMember": 2,
        "topologyConstraint": {"topology": "cluster-topology", "requiredTopologyLevel": "rack"},
    }


def test_podgroups_for_no_scheduling_baseline_prints_no_workload():
    kinds = [o["kind"] for o in podgroup_objects(load("no-sched-baseline.yaml"))]
    assert kinds == ["PodGroup"]


def test_podgroups_for_the_dra_example_wires_the_claim_template():
    out = podgroup_objects(load("dra-shared-claim.yaml"))
    assert out[1]["spec"]["resourceClaims"] == [
        {"name": "imex-channel", "resourceClaimTemplateName": "imex-channel-template"}
    ]
