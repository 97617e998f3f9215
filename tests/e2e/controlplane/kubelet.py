"""A kubelet's last word, for the e2e plane's fake nodes: complete the deletion of terminating pods.

The plane's nodes have no kubelet, so a bound pod that is deleted or evicted keeps its deletionTimestamp
and stays Terminating forever (the API server waits for the kubelet to confirm the containers are gone).
KubeletStandIn follows pods with the benches' list+watch thread (bench/podwatch.py) and, for each pod
bound to a node that has a deletionTimestamp, does what the kubelet would once the containers
stopped: DELETE it with gracePeriodSeconds 0 (and the pod's uid as a precondition, so a pod recreated
under the same name is never touched). Pending pods need nothing: the API server deletes an unbound
pod at once.
"""

from __future__ import annotations

import ssl
import sys
import urllib.error
import urllib.request
from typing import Any

import orjson

from bench.podwatch import PodWatch

PODS = "/api/v1/pods"


class KubeletStandIn:
    def __init__(self, server: str, token: str, *, watch_timeout_s: int = 10) -> None:
        self.server, self.token = server, token
        self.completed: list[str] = []
        """"namespace/name" of every pod whose deletion it completed, in order."""
        self._done: set[str] = set()  # uids already completed: a watch replay does not DELETE again
        self._watch = PodWatch(server, PODS, self._observe, token=token, timeout_s=watch_timeout_s)
        self._tls = ssl.create_default_context()
        self._tls.check_hostname = False  # the loopback API server's self-signed certificate
        self._tls.verify_mode = ssl.CERT_NONE

    def start(self) -> KubeletStandIn:
        self._watch.start()
        return self

    def stop(self, *, wait_s: float | None = None) -> None:
        """Stop following; wait for the thread up to `wait_s` (None: until its watch ends)."""
        self._watch.stop(wait_s=wait_s)

    def _observe(self, event_type: str, pod: dict[str, Any], seen_s: float) -> None:
        if event_type in ("ADDED", "MODIFIED"):
            self._complete(pod)

    def _open(self, path: str, timeout_s: float, *, method: str = "GET", body: Any = None) -> Any:
        request = urllib.request.Request(
            f"{self.server}{path}",
            data=None if body is None else orjson.dumps(body),
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        return urllib.request.urlopen(request, context=self._tls, timeout=timeout_s)

    def _complete(self, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        if (
            not meta.get("deletionTimestamp")
            or not (pod.get("spec") or {}).get("nodeName")
            or uid in self._done
        ):
            return
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": uid},
        }
        try:
            with self._open(f"/api/v1/namespaces/{ns}/pods/{name}", 30, method="DELETE", body=body):
                pass
        except urllib.error.HTTPError as exc:
            if exc.code not in (404, 409):  # 404: gone already; 409: another pod has the name now
                print(f"# kubelet stand-in: completing {ns}/{name}: {exc}", file=sys.stderr, flush=True)
                return  # seen again on the next relist
        except OSError as exc:
            print(f"# kubelet stand-in: completing {ns}/{name}: {exc!r}", file=sys.stderr, flush=True)
            return
        self._done.add(uid)
        self.completed.append(f"{ns}/{name}")
