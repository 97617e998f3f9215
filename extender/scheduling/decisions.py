"""What a verb decides: the outcome enums and the records the server encodes and carries out."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from extender.gang.entry import Arrival
from extender.model.keys import GroupKey, PodKey
from extender.scheduling.ledger import Release


class UnknownNodesError(ValueError):
    """kube-scheduler named nodes this service has never seen: the caller's input, HTTP 400."""


class Verdict(enum.Enum):
    PASS = "pass"  # some nodes pass
    NO_FIT = "no-fit"  # nothing fits now; preemption might help
    WAITING = "waiting"  # gang quorum, group object or backoff: retry later
    REJECTED = "rejected"  # the pod itself is invalid for scheduling


@dataclasses.dataclass(frozen=True)
class Effect:
    """A write the server performs after answering: nudge, event, pod condition, group status."""

    kind: str  # "nudge" | "event" | "condition" | "group-status"
    namespace: str
    name: str
    data: dict[str, Any]


@dataclasses.dataclass
class FilterDecision:
    verdict: Verdict
    passed: list[str]
    reason: str = ""
    unresolvable: bool = True
    effects: list[Effect] = dataclasses.field(default_factory=list)
    lagging_on: str = ""
    """A refusal only: an offered node where kube-scheduler found room this cache does not see yet
    (scheduling.lagging); the refusal is answered as an error kube-scheduler retries after backoff."""


class BindVerdict(enum.Enum):
    NOW = "now"  # bind this pod alone, now (its capacity is held)
    DONE = "done"  # already bound to that node (or confirmed by the API): answer success
    WAIT = "wait"  # wait at the gang's barrier
    RELEASE = "release"  # the barrier is complete: bind every member in `members`
    IN_FLIGHT = "in-flight"  # this pod's release bind is in flight: answer with its outcome
    REFUSE = "refuse"  # answer an error
    FENCED = "fenced"  # too soon after start-up to bind: decide again in `wait_s`, or answer `message`


@dataclasses.dataclass
class BindDecision:
    verdict: BindVerdict
    gang: GroupKey | None = None
    message: str = ""
    members: list[Release] = dataclasses.field(default_factory=list)  # RELEASE
    wait_s: float = 0.0  # FENCED


ARRIVAL_VERDICT = {
    Arrival.WAIT: BindVerdict.WAIT,
    Arrival.RELEASE: BindVerdict.RELEASE,
    Arrival.IN_FLIGHT: BindVerdict.IN_FLIGHT,
}


def pod_ref(key: PodKey) -> tuple[str, str]:
    ns, _, name = key.partition("/")
    return ns, name
