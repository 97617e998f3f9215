"""The gang-extender command as a user meets it: help, settings errors, podgroups, explain, simulate."""

from __future__ import annotations

import subprocess
import sys

import pytest

from extender import cli
from extender.config import MIN_BIND_MARGIN_S, Settings, default_settings, validate

SEED = "extender/scenarios/seed"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "extender", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_every_serve_flag_has_help_and_an_environment_twin():
    out = run("serve", "--help").stdout
    for flag in cli.SERVE_FLAGS:
        assert f"--{flag.name}" in out
        assert cli._env_name(flag.name) in out


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        pytest.param(
            ["serve", "--port", "http", "--gang-wait-s", "12", "--cluster", "x.yaml", "--kubeconfig", "k"],
            {},
            [
                "--port must be a whole number, got 'http'",
                "--gang-wait-s (12) must end at least 1s before --http-timeout-s (10)",
                "choose one cluster source",
            ],
            id="every error is reported at once",
        ),
        pytest.param(
            ["serve", "--cluster", "x.yaml"],
            {"GANG_EXTENDER_REASON_NODES": "0", "GANG_EXTENDER_LOG_LEVEL": "chatty"},
            ["--reason-nodes must be at least 1, got 0", "--log-level must be DEBUG, INFO, WARNING or ERROR"],
            id="environment twins are validated like flags",
        ),
        pytest.param(
            ["serve", "--cluster", "x.yaml"],
            {"GANG_EXTENDER_PORT": "eighty"},
            ["GANG_EXTENDER_PORT must be a whole number, got 'eighty'"],
            id="a bad environment value names the variable",
        ),
        pytest.param(
            ["serve", "--cluster", "x.yaml", "--gang-wait-s", "3.99", "--http-timeout-s", "4"],
            {},
            [
                "--gang-wait-s (3.99) must end at least 1s before --http-timeout-s (4)",
                "lower --gang-wait-s to 3",
            ],
            id="a gang wait with no margin before httpTimeout",
        ),
        pytest.param(
            ["serve", "--cluster", "x.yaml", "--pool-reserve", "-1", "--pool-label", "a b"],
            {},
            [
                "--pool-reserve must be 0 or more domains' worth of room, got -1.0",
                "--pool-label must be a node label key without spaces, got 'a b'",
            ],
            id="a negative pool reserve and a label with a space",
        ),
        pytest.param(
            ["serve", "--cluster", "x.yaml", "--preemption-hold-s", "0"],
            {},
            ["--preemption-hold-s must be positive, got 0.0"],
            id="a preemption hold of no time",
        ),
        pytest.param(
            ["serve", "--cluster", "x.yaml", "--bind-fence-s", "-1"],
            {"GANG_EXTENDER_BIND_FENCE_S": "nan"},
            ["--bind-fence-s must be between 0 and 600 seconds, got -1.0"],
            id="a negative bind fence (the flag wins over its environment twin)",
        ),
        pytest.param(
            ["serve", "--cluster", "x.yaml"],
            {"GANG_EXTENDER_BIND_FENCE_S": "nan"},
            ["--bind-fence-s must be between 0 and 600 seconds, got nan"],
            id="a bind fence that is not a number",
        ),
        pytest.param(["serve"], {}, ["serve needs a cluster source"], id="serve without a cluster source"),
        pytest.param(
            ["serve", "--kubeconfig", "k", "--leader-lease", "gang-scheduler", "--leader-identity", "p_1"],
            {},
            ["--leader-lease wants NAMESPACE/NAME", "--leader-identity is the pod's name"],
            id="a leader lease without its namespace, an identity that is no pod name",
        ),
        pytest.param(
            ["serve", "--cluster", "x.yaml", "--leader-lease", "kube-system/gang-scheduler"],
            {},
            ["an embedded --cluster has no Lease, so the service would never write: drop --leader-lease"],
            id="a leader lease on an embedded cluster",
        ),
        pytest.param(
            ["serve", "--cluster", "/nonexistent/cluster.yaml"],
            {},
            ["/nonexistent/cluster.yaml: cannot read"],
            id="a cluster file that cannot be read",
        ),
    ],
)
def test_settings_errors_exit_2_and_say_what_to_fix(argv, env, expected):
    res = run(*argv, env=env)
    assert res.returncode == 2
    for text in expected:
        assert text in res.stderr


@pytest.mark.parametrize(
    ("wait_s", "http_timeout_s", "error"),
    [
        (
            3.99,
            4.0,
            "--gang-wait-s (3.99) must end at least 1s before --http-timeout-s (4), so that a released "
            "gang's binds (parallel POSTs to the API server) are answered before kube-scheduler gives up "
            "on them: lower --gang-wait-s to 3, or raise the scheduler's httpTimeout and --http-timeout-s "
            "to 4.99",
        ),
        (3.0, 4.0, None),
        (8.0, 10.0, None),
        (2.9, 3.9, None),
        (9.5, 10.0, "--gang-wait-s (9.5) must end at least 1s before --http-timeout-s (10)"),
        (0.5, 1.0, "raise the scheduler's httpTimeout and --http-timeout-s to 1.5"),
    ],
    ids=[
        "3.99 of 4: no margin",
        "3 of 4: the margin exactly",
        "the defaults, 8 of 10",
        "2.9 of 3.9: the margin despite float rounding",
        "9.5 of 10: half the margin",
        "a timeout below the margin: only raising it helps",
    ],
)
def test_the_gang_wait_ends_a_margin_before_http_timeout(wait_s, http_timeout_s, error):
    """Issue 9, defect 8: 3.99 and 4 were accepted and a bind was answered at 4.004 s."""
    settings = default_settings(gang_wait_s=wait_s, cluster_http_timeout_s=http_timeout_s)
    errors = validate(settings)
    if error is None:
        assert errors == []
    else:
        assert len(errors) == 1 and error in errors[0]
    assert MIN_BIND_MARGIN_S == 1.0


def test_a_flag_wins_over_its_environment_twin(monkeypatch):
    monkeypatch.setenv("GANG_EXTENDER_PORT", "9000")
    ns = cli.build_parser().parse_args(["serve", "--port", "9100"])
    settings, errors = cli.settings_from(ns, cli.SERVE_FLAGS)
    assert errors == [] and settings.server.port == 9100
    ns = cli.build_parser().parse_args(["serve"])
    settings, _ = cli.settings_from(ns, cli.SERVE_FLAGS)
    assert settings.server.port == 9000
    assert settings.gang == Settings().gang


def test_a_malformed_cluster_file_is_named(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("apiVersion: v1\nkind: Node\nmetadata: {}\n")
    res = run("serve", "--cluster", str(bad))
    assert res.returncode == 2
    assert f"{bad}: document 1: Node has no metadata.name" in res.stderr


def test_podgroups_prints_the_derived_objects_in_the_1_37_shape_by_default():
    res = run("podgroups", "-f", f"{SEED}/topo-training.yaml")
    assert res.returncode == 0, res.stderr
    import yaml

    docs = list(yaml.safe_load_all(res.stdout))
    assert [d["kind"] for d in docs] == ["Workload", "PodGroup", "PodGroup"]
    # the shape kube 1.37 serves: v1beta1, workloadRef, a policy on each PodGroup
    assert {d["apiVersion"] for d in docs} == {"scheduling.k8s.io/v1beta1"}
    workers = docs[2]
    assert workers["spec"]["workloadRef"] == {
        "workloadName": docs[0]["metadata"]["name"],
        "templateName": docs[0]["spec"]["podGroupTemplates"][1]["name"],
    }
    assert "podGroupTemplateRef" not in workers["spec"]
    assert workers["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
    assert workers["spec"]["schedulingConstraints"] == {"topology": [{"key": "topology.kubernetes.io/rack"}]}
    assert docs[1]["spec"]["schedulingPolicy"] == {"basic": {}}
    workload, pg = yaml.safe_load_all(run("podgroups", "-f", f"{SEED}/gang-training.yaml").stdout)
    assert workload["spec"]["podGroupTemplates"][0]["disruptionMode"] == {"all": {}}
    assert pg["spec"]["disruptionMode"] == {"all": {}}
    as_json = run("podgroups", "-f", f"{SEED}/batch-job-min-member.yaml", "-o", "json")
    import json

    (pg,) = json.loads(as_json.stdout)["items"]
    assert pg["apiVersion"] == "scheduling.run.ai/v2alpha2" and pg["spec"]["minMember"] == 2


def test_podgroups_prints_the_1_36_shape_with_api_version_v1alpha2():
    import yaml

    for flag in ("v1alpha2", "scheduling.k8s.io/v1alpha2"):
        res = run("podgroups", "-f", f"{SEED}/gang-training.yaml", "--api-version", flag)
        assert res.returncode == 0, res.stderr
        workload, pg = yaml.safe_load_all(res.stdout)
        assert workload["apiVersion"] == pg["apiVersion"] == "scheduling.k8s.io/v1alpha2"
        # the JobSet says disruptionMode: {all: {}}; the v1alpha2 objects say it as the string enum
        assert workload["spec"]["podGroupTemplates"][0]["disruptionMode"] == "PodGroup"
        assert pg["spec"]["disruptionMode"] == "PodGroup"
        assert pg["spec"]["podGroupTemplateRef"]["workload"]["workloadName"] == workload["metadata"]["name"]
        assert "workloadRef" not in pg["spec"]


def test_podgroups_refuses_an_unknown_api_version_naming_the_known_ones():
    res = run("podgroups", "-f", f"{SEED}/gang-training.yaml", "--api-version", "v1")
    assert res.returncode == 2
    assert "--api-version must be one of scheduling.k8s.io/v1beta1" in res.stderr
    assert "got 'scheduling.k8s.io/v1'" in res.stderr
    assert res.stdout == ""


def test_podgroups_rejects_an_invalid_workload_naming_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        """apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: bad, namespace: default}
spec:
  scheduling:
    replicatedJobs:
    - targetReplicatedJobs: [nope]
  replicatedJobs:
  - name: w
    replicas: 1
    template: {spec: {parallelism: 1, template: {spec: {containers: [{name: c, image: x}]}}}}
"""
    )
    res = run("podgroups", "-f", str(bad))
    assert res.returncode == 2
    assert "spec.scheduling.replicatedJobs[0].targetReplicatedJobs" in res.stderr
    assert res.stdout == ""


def test_podgroups_says_which_pods_it_left_out_for_want_of_their_owner(tmp_path):
    """A pod of a Job not in the file gets no group of its own (its gang is derived from the Job): it
    is left out, and stderr says so and names the Job, once for all its pods, the output still a
    document to apply; so is a pod naming a subgroup its PodGroup lacks."""
    pods = tmp_path / "pods.yaml"
    job_pod = """apiVersion: v1
kind: Pod
metadata:
  name: train-{i}
  namespace: ml
  ownerReferences:
  - {{apiVersion: batch/v1, kind: Job, name: train, uid: u1, controller: true}}
spec: {{containers: [{{name: c, image: x}}]}}
---
"""
    pods.write_text(
        "".join(job_pod.format(i=i) for i in range(2))
        + """apiVersion: v1
kind: Pod
metadata: {name: alone, namespace: ml}
spec: {containers: [{name: c, image: x}]}
---
apiVersion: scheduling.run.ai/v2alpha2
kind: PodGroup
metadata: {name: pg, namespace: ml}
spec:
  minMember: 1
  subGroups: [{name: a, minMember: 1}]
---
apiVersion: v1
kind: Pod
metadata:
  name: odd
  namespace: ml
  annotations: {pod-group-name: pg}
  labels: {kai.scheduler/subgroup-name: zzz}
spec: {containers: [{name: c, image: x}]}
"""
    )
    res = run("podgroups", "-f", str(pods))
    assert res.returncode == 0, res.stderr
    import yaml

    docs = list(yaml.safe_load_all(res.stdout))
    assert sorted(d["metadata"]["name"] for d in docs) == ["pg", docs[0]["metadata"]["name"]], docs
    assert docs[0]["metadata"]["ownerReferences"][0]["name"] == "alone", docs
    assert res.stderr.splitlines() == [
        "note: 2 pods (ml/train-0, ml/train-1) left out: the owner Job ml/train is not in the files "
        "given (the gang is derived from it)",
        'note: pod (ml/odd) left out: Pod references subgroup "zzz", which does not exist in PodGroup ml/pg',
    ]


def test_explain_says_how_to_reach_the_service_when_it_is_not_there():
    res = run("explain", "ml/train", "--url", "http://127.0.0.1:9")
    assert res.returncode == 2
    assert "cannot reach the extender at http://127.0.0.1:9" in res.stderr
    assert run("explain", "not-a-key").returncode == 2


def test_explain_renders_a_gang_for_a_person():
    text = cli.render_gang(
        {
            "gang": "ml/train",
            "phase": "Binding",
            "policy": "gang",
            "quorum": 2,
            "domain": "rack r1",
            "lastReason": "planned 2 pods in rack r1",
            "members": [
                {"pod": "ml/a", "subgroup": None, "node": None, "planned": "n1", "waitingAtBind": True},
                {"pod": "ml/b", "subgroup": "w", "node": "n2", "planned": None, "waitingAtBind": False},
            ],
        }
    )
    assert "Phase:       Binding" in text and "Domain:      rack r1" in text
    assert "ml/a  planned on n1, waiting at bind" in text
    assert "ml/b  bound to n2 [w]" in text


def test_explain_shows_a_preemptors_plan():
    text = cli.render_gang(
        {
            "gang": "ml/urgent",
            "phase": "Pending",
            "policy": "gang",
            "quorum": 2,
            "lastReason": "gang ml/urgent: preempting 1 gang (ml/batch) in rack r1",
            "members": [],
            "preemption": {
                "domain": "rack r1",
                "priority": 1000,
                "victimPriority": 100,
                "holdLeftS": 42.5,
                "victims": [
                    {"pod": "ml/batch-0", "node": "n1", "gang": "ml/batch", "gone": True},
                    {"pod": "ml/batch-1", "node": "n2", "gang": "ml/batch", "gone": False},
                ],
            },
        }
    )
    assert "Preempting:  rack r1 for priority 1000 (victims <= 100); room held 42.5s more" in text
    assert "ml/batch-0 on n1, with its gang ml/batch: gone" in text
    assert "ml/batch-1 on n2, with its gang ml/batch: being evicted" in text


def test_simulate_runs_a_file_and_prints_json(tmp_path):
    res = run("simulate", f"{SEED}/gang-training.yaml", "--format", "json", "--gang-wait-s", "3")
    assert res.returncode == 0, res.stderr
    import json

    report = json.loads(res.stdout)
    assert report["summary"]["pods_bound"] == report["summary"]["pods_total"] == 5
    bad = run("simulate", "--format", "xml", "/nonexistent.yaml")
    assert bad.returncode == 2
    assert "--format must be text or json" in bad.stderr and "/nonexistent.yaml: no such file" in bad.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--kubeconfig", "/nonexistent/kubeconfig"], "cannot load kubeconfig '/nonexistent/kubeconfig'"),
        (["--kubeconfig", "{garbage}"], "cannot load kubeconfig '{garbage}'"),
        (["--in-cluster", "true"], "is this process running in a pod with a service account?"),
    ],
    ids=["a missing kubeconfig", "a file that is no kubeconfig", "in-cluster outside a pod"],
)
def test_a_fatal_configuration_error_exits_non_zero_with_the_reason(tmp_path, args, says):
    """It used to stay up answering /healthz 200 and /readyz 503 forever."""
    garbage = tmp_path / "kubeconfig"
    garbage.write_text("this: is\nnot: a kubeconfig\n")
    args = [a.format(garbage=garbage) for a in args]
    says = says.format(garbage=garbage)
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("KUBERNETES_SERVICE")}
    proc = run("serve", *args, "--port", "0", env=env)
    assert proc.returncode == 2, proc.stderr[-500:]
    assert says in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        ([], {}, True),
        (["--podgrouper", "false"], {}, False),
        ([], {"GANG_EXTENDER_PODGROUPER": "off"}, False),
        (["--podgrouper", "true"], {"GANG_EXTENDER_PODGROUPER": "false"}, True),
    ],
    ids=["on by default", "the flag turns it off", "so does its twin", "the flag wins"],
)
def test_the_podgrouper_flag(monkeypatch, argv, env, expected):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    ns = cli.build_parser().parse_args(["serve", *argv])
    settings, errors = cli.settings_from(ns, cli.SERVE_FLAGS)
    assert errors == [] and settings.cluster.podgrouper is expected


@pytest.mark.parametrize(
    ("scheduling", "template", "said"),
    [
        pytest.param(
            "{replicatedJobs: [{targetReplicatedJobs: [[w]]}]}",
            "{spec: {parallelism: 1, template: {spec: {}}}}",
            "replicatedJobs[0].targetReplicatedJobs[0]: must be a replicatedJob's name, not list",
            id="a target that is a list",
        ),
        pytest.param("{}", "x", "malformed object", id="a template that is a string"),
    ],
)
def test_podgroups_names_a_malformed_jobsets_field_without_a_traceback(tmp_path, scheduling, template, said):
    path = tmp_path / "js.yaml"
    path.write_text(
        "apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata: {name: aaa, namespace: default}\n"
        f"spec:\n  scheduling: {scheduling}\n  replicatedJobs:\n"
        f"  - {{name: w, replicas: 1, template: {template}}}\n"
    )
    res = run("podgroups", "-f", str(path))
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and said in res.stderr, res.stderr
