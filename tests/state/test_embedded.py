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
    ],
    ids=["a list", "no apiVersion", "a List item without apiVersion", "broken YAML", "broken JSON"],
)
def test_a_bad_cluster_file_says_where(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ClusterFileError, match=message):
        load_objects(str(path))


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
