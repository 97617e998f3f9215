"""expand(): workloads become exactly what their controllers would create."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from extender.model import labels as L
from extender.sim.expand import DEFAULT_SCHEDULER, expand
from extender.sim.scenario import load_objects, seed_paths

CONTAINER = {"name": "c", "image": "sleep:v0.1.0", "resources": {"requests": {"cpu": "100m"}}}


def job(name: str = "j", *, parallelism: int = 2, completions: int | None = None, **spec: Any) -> dict:
    s = {"parallelism": parallelism, "template": {"spec": {"containers": [CONTAINER]}}, **spec}
    if completions is not None:
        s["completions"] = completions
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "ml"}, "spec": s}


def rjob(name: str, *, replicas: int = 1, parallelism: int = 1, **extra: Any) -> dict:
    return {
        "name": name,
        "replicas": replicas,
        "template": {
            "spec": {
                "parallelism": parallelism,
                "completions": parallelism,
                "completionMode": "Indexed",
                "template": {"spec": {"containers": [CONTAINER]}},
            }
        },
        **extra,
    }


def jobset(name: str, *rjobs: dict, **spec: Any) -> dict:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"network": {"enableDNSHostnames": True}, "replicatedJobs": list(rjobs), **spec},
    }


def pods_of(objects: list[dict]) -> list[dict]:
    return [o for o in objects if o["kind"] == "Pod"]


def kinds(objects: list[dict]) -> list[str]:
    return [o["kind"] for o in objects]


@pytest.mark.parametrize(
    ("workload", "expected_pods"),
    [
        pytest.param(job(parallelism=2), 2, id="a Job creates parallelism pods"),
        pytest.param(
            job(parallelism=4, completions=3), 3, id="a Job never creates more pods than completions"
        ),
        pytest.param(job(parallelism=3, suspend=True), 0, id="a suspended Job creates no pods"),
        pytest.param(job(parallelism=0), 0, id="a Job with parallelism 0 creates no pods"),
        pytest.param(
            jobset("js", rjob("a", replicas=2, parallelism=3)),
            6,
            id="a JobSet creates replicas x parallelism pods",
        ),
        pytest.param(
            jobset("js", rjob("a", replicas=2), suspend=True), 0, id="a suspended JobSet creates no pods"
        ),
    ],
)
def test_pod_counts(workload: dict, expected_pods: int) -> None:
    out = expand([workload])
    assert out.problems == []
    assert len(out.pods) == expected_pods


def test_indexed_job_pods_carry_the_completion_index_and_job_labels() -> None:
    out = expand([job("train", parallelism=2, completionMode="Indexed")])
    owner = out.objects[0]
    for i, pod in enumerate(out.pods):
        meta = pod["metadata"]
        assert meta["name"].startswith(f"train-{i}-") and len(meta["name"]) == len("train-0-") + 5
        assert meta["labels"][L.JOB_COMPLETION_INDEX] == str(i)
        assert meta["annotations"][L.JOB_COMPLETION_INDEX] == str(i)
        assert meta["labels"][L.JOB_NAME] == meta["labels"][L.JOB_NAME_LEGACY] == "train"
        assert meta["labels"][L.CONTROLLER_UID] == owner["metadata"]["uid"]
        ref = meta["ownerReferences"][0]
        assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
            "Job",
            "train",
            owner["metadata"]["uid"],
            True,
        )
        assert pod["spec"]["schedulerName"] == DEFAULT_SCHEDULER


def test_non_indexed_job_pods_have_no_completion_index() -> None:
    out = expand([job("plain", parallelism=1)])
    assert L.JOB_COMPLETION_INDEX not in out.pods[0]["metadata"]["labels"]


def test_jobset_child_jobs_and_pods_carry_the_jobset_controller_labels() -> None:
    js = jobset("train", rjob("driver"), rjob("workers", replicas=2, parallelism=2))
    out = expand([js])
    jobs = [o for o in out.objects if o["kind"] == "Job"]
    assert [j["metadata"]["name"] for j in jobs] == ["train-driver-0", "train-workers-0", "train-workers-1"]
    js_uid = out.objects[0]["metadata"]["uid"]
    w1 = jobs[2]
    expected = {
        L.JOBSET_NAME: "train",
        L.JOBSET_UID: js_uid,
        L.REPLICATED_JOB_NAME: "workers",
        L.REPLICATED_JOB_REPLICAS: "2",
        L.GLOBAL_REPLICAS: "3",
        L.JOB_INDEX: "1",
        L.JOB_GLOBAL_INDEX: "2",
        L.RESTART_ATTEMPT: "0",
        L.JOB_KEY: hashlib.sha1(b"ml/train-workers-1").hexdigest(),
        "jobset.sigs.k8s.io/group-name": "default",
        "jobset.sigs.k8s.io/group-replicas": "3",
        "jobset.sigs.k8s.io/job-group-index": "2",
    }
    for where in (w1["metadata"]["labels"], w1["metadata"]["annotations"]):
        assert {k: where[k] for k in expected} == expected
    assert w1["metadata"]["ownerReferences"][0]["uid"] == js_uid
    w1_pods = [p for p in out.pods if p["metadata"]["ownerReferences"][0]["name"] == "train-workers-1"]
    assert len(w1_pods) == 2
    for i, pod in enumerate(w1_pods):
        labels = pod["metadata"]["labels"]
        assert {k: labels[k] for k in expected} == expected
        assert labels[L.JOB_COMPLETION_INDEX] == str(i)
        assert pod["metadata"]["name"].startswith(f"train-workers-1-{i}-")
        assert pod["spec"]["subdomain"] == "train"
        assert pod["spec"]["hostname"] == f"train-workers-1-{i}"
    assert {w.label for w in out.workload_of.values()} == {"JobSet ml/train"}


def test_depends_on_holds_the_worker_jobs_until_the_leader_is_ready() -> None:
    js = jobset(
        "seq",
        rjob("leader"),
        rjob("worker", parallelism=2, dependsOn=[{"name": "leader", "status": "Ready"}]),
    )
    out = expand([js])
    assert [p["metadata"]["labels"][L.REPLICATED_JOB_NAME] for p in out.pods] == ["leader"]
    assert out.held() == ["ml/seq/worker"]
    assert out.release(lambda key: False) == []
    created = out.release(lambda key: True)
    assert kinds(created) == ["Job", "Pod", "Pod"]
    assert out.held() == []
    assert len(out.pods) == 3


def test_in_order_startup_releases_one_replicated_job_at_a_time() -> None:
    js = jobset("ord", rjob("a"), rjob("b"), rjob("c"), startupPolicy={"startupPolicyOrder": "InOrder"})
    out = expand([js])
    ready: set[str] = set()

    def is_ready(key: str) -> bool:
        return key in ready

    assert out.held() == ["ml/ord/b", "ml/ord/c"]
    ready.update(f"ml/{p['metadata']['name']}" for p in out.pods)
    assert [o["metadata"]["name"] for o in out.release(is_ready) if o["kind"] == "Job"] == ["ord-b-0"]
    assert out.held() == ["ml/ord/c"]


def test_pytorchjob_creates_master_then_workers_with_training_operator_labels() -> None:
    pj = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "mnist", "namespace": "ml"},
        "spec": {
            "pytorchReplicaSpecs": {
                "Worker": {"replicas": 2, "template": {"spec": {"containers": [CONTAINER]}}},
                "Master": {"replicas": 1, "template": {"spec": {"containers": [CONTAINER]}}},
            }
        },
    }
    out = expand([pj])
    assert [p["metadata"]["name"] for p in out.pods] == ["mnist-master-0", "mnist-worker-0", "mnist-worker-1"]
    labels = out.pods[2]["metadata"]["labels"]
    assert labels[L.PYTORCH_REPLICA_TYPE] == "worker"
    assert labels[L.PYTORCH_REPLICA_INDEX] == "1"
    assert labels[L.PYTORCH_JOB_NAME] == "mnist"
    assert out.pods[0]["metadata"]["ownerReferences"][0]["kind"] == "PyTorchJob"


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}, id="a Node passes through"
        ),
        pytest.param(
            {
                "apiVersion": "scheduling.run.ai/v2alpha2",
                "kind": "PodGroup",
                "metadata": {"name": "pg", "namespace": "ml"},
                "spec": {"minMember": 2},
            },
            id="a PodGroup passes through",
        ),
        pytest.param(
            {"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}},
            id="an unknown kind passes through",
        ),
    ],
)
def test_other_kinds_pass_through_unchanged(obj: dict) -> None:
    out = expand([obj])
    assert out.pods == [] and out.problems == []
    assert (
        out.objects[0]["spec" if "spec" in obj else "metadata"]
        == obj["spec" if "spec" in obj else "metadata"]
    )


def test_a_bare_pod_passes_through_with_the_simulators_scheduler() -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {"containers": [CONTAINER]},
    }
    out = expand([pod])
    assert [p["metadata"]["name"] for p in out.pods] == ["p"]
    assert out.pods[0]["spec"]["schedulerName"] == DEFAULT_SCHEDULER
    assert pod["spec"].get("schedulerName") is None  # the caller's object is not modified


def test_the_same_seed_gives_the_same_names_and_another_seed_other_names() -> None:
    js = jobset("det", rjob("w", replicas=2, parallelism=2))
    names = lambda seed: [p["metadata"]["name"] for p in expand([js], seed=seed).pods]  # noqa: E731
    assert names(1) == names(1)
    assert names(1) != names(2)


def test_a_later_object_with_the_same_name_replaces_the_earlier_one() -> None:
    out = expand([job("j", parallelism=2), job("j", parallelism=4)])
    assert len(out.pods) == 4


@pytest.mark.parametrize(
    ("obj", "needle"),
    [
        pytest.param(
            jobset("bad", rjob("w", replicas="two")), "replicas", id="JobSet replicas that is not a number"
        ),
        pytest.param(job("bad", parallelism=-1), "spec.parallelism", id="a negative Job parallelism"),
        pytest.param(
            {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "t"}, "spec": {}},
            "spec.template",
            id="a Job without a pod template",
        ),
        pytest.param(jobset("empty"), "spec.replicatedJobs", id="a JobSet without replicatedJobs"),
        pytest.param("not an object", "expected a Kubernetes object", id="a document that is not a map"),
        pytest.param({"kind": "Job"}, "metadata.name", id="an object without a name"),
    ],
)
def test_bad_workloads_are_skipped_with_a_message_naming_the_field(obj: Any, needle: str) -> None:
    out = expand([obj, job("ok", parallelism=1)])
    assert len(out.problems) == 1 and needle in out.problems[0]
    assert len(out.pods) == 1  # the good workload still expands


SEED_PODS = {
    "batch-job.yaml": 2,
    "batch-job-min-member.yaml": 6,
    "external-podgroup-job.yaml": 2,
    "pytorch-job.yaml": 3,
    "kai-jobset-topology.yaml": 7,
    "gang-training.yaml": 5,
    "single-gang.yaml": 8,
    "no-sched-baseline.yaml": 2,
    "per-rj-independent.yaml": 5,
    "per-rj-grouped.yaml": 5,
    "per-ij-job-independent.yaml": 5,
    "topo-training.yaml": 5,
    "tpu-multislice.yaml": 4,
    "sequenced-gang.yaml": 1,  # the worker waits for the leader to be Ready
    "gang-suspend.yaml": 2,
    "gang-elastic.yaml": 2,
    "gang-elastic-scale-patch.yaml": 4,
    "dra-shared-claim.yaml": 2,
}


@pytest.mark.parametrize("path", seed_paths(), ids=lambda p: p.rsplit("/", 1)[-1])
def test_every_seed_manifest_expands_cleanly(path: str) -> None:
    out = expand(load_objects([path]))
    assert out.problems == []
    name = path.rsplit("/", 1)[-1]
    if name in SEED_PODS:
        assert len(out.pods) == SEED_PODS[name]
