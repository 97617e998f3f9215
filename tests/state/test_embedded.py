"""The embedded cluster behaves like an API server where the service can tell."""

from __future__ import annotations

import pytest

from extender.state.embedded import ClusterFileError, EmbeddedCluster, load_objects
from tests.builders import make_node, make_pod


def test_a_recreated_object_gets_a_new_uid_and_an_updated_one_keeps_it():
    cluster = EmbeddedCluster([make_pod("p")])
    first = cluster.get("", "Pod", "default", "p")["metadata"]["uid"]
    assert EmbeddedCluster([make_pod("p")]).get("", "Pod", "default", "p")["metadata"]["uid"] == first
    cluster.apply(make_pod("p", labels={"x": "y"}))
    assert cluster.get("", "Pod", "default", "p")["metadata"]["uid"] == first
    cluster.delete("", "Pod", "default", "p")
    cluster.apply(make_pod("p"))
    assert cluster.get("", "Pod", "default", "p")["metadata"]["uid"] != first


async def test_bind_sets_the_node_once_and_refuses_a_second_node():
    cluster = EmbeddedCluster([make_node("a"), make_node("b"), make_pod("p")])
    uid = cluster.get("", "Pod", "default", "p")["metadata"]["uid"]
    await cluster.bind_pod(namespace="default", name="p", uid=uid, node="a")
    await cluster.bind_pod(namespace="default", name="p", uid=uid, node="a")  # same node: success
    from extender.state.source import BindError

    with pytest.raises(BindError, match="already assigned to node a"):
        await cluster.bind_pod(namespace="default", name="p", uid=uid, node="b")
    with pytest.raises(BindError, match="has uid"):
        await cluster.bind_pod(namespace="default", name="p", uid="stale", node="a")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- 1\n- 2\n", "document 1 is not a Kubernetes object"),
        ("kind: Node\nmetadata: {name: a}\n", "every object needs apiVersion and kind"),
        ('{"apiVersion": "v1", "kind": "List", "items": [{"kind": "Pod"}]}', "item 1: every object needs"),
        ("a: [\n", "not valid YAML"),
        ('{"apiVersion": ', "not valid JSON"),
        ('{"apiVersion": "v1", "kind": "List", "items": 5}', "items is not a list"),
        (
            '[{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}, 7]',
            "document 2 is not a Kubernetes",
        ),
        ('{"apiVersion": "v1", "kind": "List"}', "List has no metadata.name"),
        ('{"apiVersion": "v1", "kind": "Pod", "metadata": "p"}', "Pod has no metadata.name"),
        ("[" * 100_000 + "]" * 100_000, r"c.yaml: (not valid JSON|nested too deeply)"),
    ],
    ids=[
        "a list",
        "no apiVersion",
        "a List item without apiVersion",
        "broken YAML",
        "broken JSON",
        "List items not a list",
        "an array with a number",
        "a List without items",
        "metadata not a mapping",
        "nested too deeply",
    ],
)
@pytest.mark.parametrize("projected", [False, True], ids=["whole", "projected"])
def test_a_bad_cluster_file_says_where(tmp_path, text, message, projected):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ClusterFileError, match=message):
        load_objects(str(path), projected=projected)


@pytest.mark.parametrize("projected", [False, True], ids=["whole", "projected"])
def test_a_cluster_file_that_is_not_utf8_says_so(tmp_path, projected):
    path = tmp_path / "c.yaml"
    path.write_bytes(b"kind: Pod\nmetadata: {name: \xff}\n")
    with pytest.raises(ClusterFileError, match="not UTF-8"):
        load_objects(str(path), projected=projected)


@pytest.mark.parametrize("projected", [False, True], ids=["whole", "projected"])
def test_a_json_string_that_is_not_utf8_says_so(tmp_path, projected):
    path = tmp_path / "c.json"
    path.write_bytes(b'[{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p\xff"}}]')
    with pytest.raises(ClusterFileError, match=r"c.json: not (UTF-8|valid JSON)"):
        load_objects(str(path), projected=projected)


def test_a_yaml_cluster_file_is_kept_as_json_would_have_it(tmp_path):
    """PyYAML makes an unquoted timestamp a datetime and an alias one object twice: the store must get
    strings, and each object parts of its own."""
    from extender.state.store import ClusterStore

    path = tmp_path / "c.yaml"
    path.write_text(
        "apiVersion: v1\nkind: List\nitems:\n"
        "- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: p\n    namespace: default\n"
        "    creationTimestamp: 2026-12-06T08:00:00Z\n    labels: &l {app: train}\n"
        "  spec: {containers: [{name: main}]}\n"
        "- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: q\n    namespace: default\n    labels: *l\n"
        "  spec: {containers: [{name: main}]}\n"
    )
    cluster = EmbeddedCluster.from_file(str(path))
    store = ClusterStore()
    cluster.attach(store)
    assert isinstance(store.get("", "Pod", "default", "p")["metadata"]["creationTimestamp"], str)


def served_pod(name: str, node: str | None = None) -> dict:
    """A pod as an API server serves it: managedFields, an image, a full status."""
    pod = make_pod(name, cpu="2", node=node, labels={"app": "train"})
    pod["metadata"]["managedFields"] = [
        {"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:spec": {}}}
    ]
    pod["spec"]["containers"][0]["image"] = "registry.example/train:1"
    pod["status"] = {
        "phase": "Pending",
        "podIP": "10.0.0.1",
        "conditions": [{"type": "Ready", "status": "False"}],
    }
    return pod


@pytest.mark.parametrize("shape", ["List", "array"])
def test_a_cluster_file_is_kept_as_the_store_keeps_it_and_gives_the_store_what_a_whole_load_does(
    tmp_path, shape
):
    """`serve --cluster`'s load (from_file): pods and nodes decoded into the kept fields only, pods
    compact; the store fed from it holds the same objects as one fed from the whole objects."""
    import orjson

    from extender.state.store import ClusterStore

    objects = [make_node("a"), make_node("b"), served_pod("p"), served_pod("q", node="a"), make_pod("r")]
    for obj in objects:  # else each load stamps its own second
        obj["metadata"]["creationTimestamp"] = "2026-12-06T08:00:00Z"
    path = tmp_path / "c.json"
    path.write_bytes(
        orjson.dumps({"apiVersion": "v1", "kind": "List", "items": objects} if shape == "List" else objects)
    )
    compact, whole = EmbeddedCluster.from_file(str(path)), EmbeddedCluster(load_objects(str(path)))
    stores = []
    for cluster in (compact, whole):
        store = ClusterStore()
        cluster.attach(store)
        stores.append(store)
    for kind in ("Pod", "Node"):
        seen = [
            sorted(orjson.dumps(o, option=orjson.OPT_SORT_KEYS) for o in st.list("", kind)) for st in stores
        ]
        assert seen[0] == seen[1] and len(seen[0]) in (2, 3)
    p = compact.get("", "Pod", "default", "p")
    assert "managedFields" not in p["metadata"] and "image" not in p["spec"]["containers"][0]
    assert "podIP" not in p["status"]


async def test_a_compact_pod_read_is_its_own_copy_and_a_write_is_kept():
    """Two pods alike share their parts in the compact store: editing one's read changes neither; the
    service's writes (bind, condition, nudge) land on the pod written to and reach the store."""
    from extender.state.store import ClusterStore

    cluster = EmbeddedCluster(compact=True)
    for obj in (make_node("a"), make_pod("p"), make_pod("q")):
        cluster.apply(obj)
    store = ClusterStore()
    cluster.attach(store)
    read = cluster.get("", "Pod", "default", "p")
    read.setdefault("status", {})["phase"] = "Failed"
    read["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "64"
    for name in ("p", "q"):
        again = cluster.get("", "Pod", "default", name)
        assert again["status"]["phase"] == "Pending"
        assert again["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "1"
    uid = cluster.get("", "Pod", "default", "p")["metadata"]["uid"]
    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    await cluster.set_pod_condition(namespace="default", name="q", condition=unschedulable)
    await cluster.nudge_pod(namespace="default", name="q", value="g:a")
    await cluster.bind_pod(namespace="default", name="p", uid=uid, node="a")
    p, q = cluster.get("", "Pod", "default", "p"), cluster.get("", "Pod", "default", "q")
    assert p["spec"]["nodeName"] == "a" and "nodeName" not in q["spec"]
    assert q["status"]["conditions"][0]["reason"] == "Unschedulable"
    assert q["metadata"]["annotations"]["gang-extender.io/nudge"] == "g:a"
    assert store.get("", "Pod", "default", "p")["spec"]["nodeName"] == "a"
    assert store.get("", "Pod", "default", "q")["metadata"]["annotations"]["gang-extender.io/nudge"] == "g:a"
    for name in ("p", "q"):  # a write's resourceVersion is the cluster's, never in the store's shared parts
        assert "resourceVersion" not in store.pods[f"default/{name}"].obj["metadata"]
    cluster.delete("", "Pod", "default", "q")
    assert cluster.get("", "Pod", "default", "q") is None and store.get("", "Pod", "default", "q") is None


def test_one_object_the_store_cannot_take_is_skipped_and_the_cluster_goes_on():
    """Issue 9, defect 2, on the embedded source: a pod asking `cpu: "1e16"` is stored (saturated), and
    an object whose application raises is counted and skipped, at attach and on later changes."""
    from extender.state.store import ClusterStore

    cluster = EmbeddedCluster(
        [make_node("a"), make_pod("huge", cpu="1e16", node="a"), make_pod("poison"), make_pod("b")]
    )
    store = ClusterStore()
    real = store.upsert

    def upsert(obj):
        if obj["metadata"]["name"] == "poison":
            raise RuntimeError("the store cannot take this one")
        real(obj)

    store.upsert = upsert
    cluster.attach(store)
    assert cluster.is_synced()
    assert {o["metadata"]["name"] for o in store.list("", "Pod")} == {"huge", "b"}
    assert cluster.bad_objects == 1
    assert cluster.last_bad_object == "Pod default/poison: RuntimeError: the store cannot take this one"
    cluster.apply(make_pod("poison", labels={"x": "y"}))
    cluster.apply(make_pod("later", cpu="1e16", node="a"))
    assert store.get("", "Pod", "default", "later") is not None, "changes after a bad one still arrive"
    assert cluster.bad_objects == 2
    assert cluster.get("", "Pod", "default", "poison")["metadata"]["labels"] == {"x": "y"}
