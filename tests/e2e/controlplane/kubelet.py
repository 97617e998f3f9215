"""A kubelet's last word, for the e2e plane's fake nodes: complete the deletion of terminating pods.

The plane's nodes have no kubelet, so a bound pod that is deleted or evicted keeps its deletionTimestamp
and stays Terminating forever (the API server waits for the kubelet to confirm the containers are gone).
KubeletStandIn watches pods on a thread of its own and, for each pod bound to a node that has a
deletionTimestamp, does what the kubelet would once the containers stopped: DELETE it with
gracePeriodSeconds 0 (and the pod's uid as a precondition, so a pod recreated under the same name is
never touched). Pending pods need nothing: the API server deletes an unbound pod at once.
"""

from __future__ import annotations

import ssl
import sys
import threading
import urllib.error
import urllib.request
from typing import Any

import orjson

PODS = "/api/v1/pods"


class KubeletStandIn:
    def __init__(self, server: str, token: str, *, watch_timeout_s: int = 10) -> None:
        self.server, self.token = server, token
        self.watch_timeout_s = watch_timeout_s
        self.completed: list[str] = []
        """"namespace/name" of every pod whose deletion it completed, in order."""
        self._done: set[str] = set()  # uids already completed: a watch replay does not DELETE again
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._tls = ssl.create_default_context()
        self._tls.check_hostname = False  # the loopback API server's self-signed certificate
        self._tls.verify_mode = ssl.CERT_NONE

    def start(self) -> KubeletStandIn:
        self._thread = threading.Thread(target=self._run, name="kubelet-standin", daemon=True)
        self._thread.start()
        return self

    def stop(self, *, wait_s: float | None = None) -> None:
        """Stop following; wait for the thread up to `wait_s` (None: until its watch ends)."""
        self._stopping.set()
        if self._thread is not None and wait_s != 0:
            self._thread.join(self.watch_timeout_s + 5 if wait_s is None else wait_s)
            if not self._thread.is_alive():
                self._thread = None

    def _open(self, path: str, timeout_s: float, *, method: str = "GET", body: Any = None) -> Any:
        request = urllib.request.Request(
            f"{self.server}{path}",
            data=None if body is None else orjson.dumps(body),
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        return urllib.request.urlopen(request, context=self._tls, timeout=timeout_s)

    def _run(self) -> None:
        rv = ""
        while not self._stopping.is_set():
            try:
                if not rv:
                    rv = self._list()
                rv = self._watch(rv)
            except (OSError, ValueError) as exc:  # kube-apiserver restarting, a broken stream: relist
                if self._stopping.is_set():
                    return
                print(f"# kubelet stand-in: {exc!r}; relisting", file=sys.stderr, flush=True)
                rv = ""
                self._stopping.wait(0.5)

    def _list(self) -> str:
        with self._open(PODS, 30) as resp:
            doc = orjson.loads(resp.read())
        for pod in doc.get("items") or ():
            self._complete(pod)
        return str(doc["metadata"]["resourceVersion"])

    def _watch(self, rv: str) -> str:
        """Follow from `rv` until the watch ends; the resourceVersion to go on from ("" to relist)."""
        query = f"?watch=true&timeoutSeconds={self.watch_timeout_s}&resourceVersion={rv}"
        with self._open(PODS + query, self.watch_timeout_s + 20) as resp:
            for line in resp:
                event = orjson.loads(line)
                if event.get("type") == "ERROR":  # 410 Gone: too old a resourceVersion
                    return ""
                pod = event.get("object") or {}
                rv = str((pod.get("metadata") or {}).get("resourceVersion") or rv)
                if event.get("type") in ("ADDED", "MODIFIED"):
                    self._complete(pod)
                if self._stopping.is_set():
                    break
        return rv

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
