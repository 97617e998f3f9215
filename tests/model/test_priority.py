"""A pod's priority and preemption policy, read from the pod as admission leaves it."""

from __future__ import annotations

import pytest

from extender.model.priority import may_preempt, pod_priority


@pytest.mark.parametrize(
    ("pod", "priority"),
    [
        pytest.param({"spec": {"priority": 1000}}, 1000, id="admitted"),
        pytest.param({"spec": {"priority": -5}}, -5, id="negative"),
        pytest.param({"spec": {"priority": 2_000_001_000}}, 2_000_001_000, id="system-node-critical"),
        pytest.param({"spec": {"priority": 0}}, 0, id="zero"),
        pytest.param({"spec": {}}, 0, id="absent"),
        pytest.param({"spec": {"priorityClassName": "high"}}, 0, id="class not resolved"),
        pytest.param({"spec": {"priority": None}}, 0, id="null"),
        pytest.param({"spec": {"priority": "1000"}}, 0, id="a string"),
        pytest.param({"spec": {"priority": 1.5}}, 0, id="a float"),
        pytest.param({"spec": {"priority": True}}, 0, id="a bool"),
        pytest.param({"spec": None}, 0, id="null spec"),
        pytest.param({"spec": []}, 0, id="spec a list"),
        pytest.param({}, 0, id="no spec"),
    ],
)
def test_pod_priority(pod, priority):
    assert pod_priority(pod) == priority


@pytest.mark.parametrize(
    ("pod", "may"),
    [
        pytest.param({"spec": {"preemptionPolicy": "Never"}}, False, id="Never"),
        pytest.param({"spec": {"preemptionPolicy": "PreemptLowerPriority"}}, True, id="PreemptLowerPriority"),
        pytest.param({"spec": {}}, True, id="absent: the default"),
        pytest.param({"spec": {"preemptionPolicy": None}}, True, id="null"),
        pytest.param({"spec": {"preemptionPolicy": "never"}}, True, id="case matters, as in the API"),
        pytest.param({"spec": None}, True, id="null spec"),
        pytest.param({}, True, id="no spec"),
    ],
)
def test_may_preempt(pod, may):
    assert may_preempt(pod) is may
