"""A pod list+watch on a thread of its own, for the benches that time binds (versus, soak).

The thread keeps timestamps honest while the bench's event loop is busy creating objects.
kube-apiserver force-closes a watcher that falls about 10 events behind (a gang's release is a burst
of them), so each watch resumes from the last resourceVersion seen, or relists after 410 Gone; a
watch that ends before its own timeoutSeconds was force-closed and is counted in `restarts`.
"""

from __future__ import annotations

import http.client
import ssl
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import orjson

Observe = Callable[[str, dict[str, Any], float], None]  # (event type, pod, monotonic time seen)


class PodWatch:
    def __init__(self, server: str, path: str, observe: Observe, *, token: str, timeout_s: int = 10) -> None:
        self.server, self.path, self.observe = server, path, observe
        self.token, self.timeout_s = token, timeout_s
        self.restarts = 0
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._tls = ssl.create_default_context()
        self._tls.check_hostname = False  # the loopback API server's self-signed certificate
        self._tls.verify_mode = ssl.CERT_NONE

    def start(self) -> None:
        """List (each pod observed as ADDED), then follow on the thread."""
        rv = self._list()
        self._thread = threading.Thread(target=self._follow, args=(rv,), daemon=True)
        self._thread.start()

    def stop(self, *, wait_s: float | None = None) -> None:
        """Stop following; wait for the thread up to `wait_s` (None: until its watch ends; 0: not at all,
        e.g. when the API server is about to go and will end the watch itself)."""
        self._stopping.set()
        if self._thread and wait_s != 0:
            self._thread.join(self.timeout_s + 5 if wait_s is None else wait_s)

    def _get(self, query: str, timeout_s: float) -> Any:
        request = urllib.request.Request(
            f"{self.server}{self.path}{query}", headers={"Authorization": f"Bearer {self.token}"}
        )
        return urllib.request.urlopen(request, context=self._tls, timeout=timeout_s)

    def _list(self) -> str:
        with self._get("", 30) as resp:
            doc = orjson.loads(resp.read())
        now = time.monotonic()
        for obj in doc["items"]:
            self.observe("ADDED", obj, now)
        return doc["metadata"]["resourceVersion"]

    def _follow(self, rv: str) -> None:
        while not self._stopping.is_set():
            opened = time.monotonic()
            try:
                query = f"?watch=true&timeoutSeconds={self.timeout_s}&resourceVersion={rv}"
                with self._get(query, self.timeout_s + 20) as resp:
                    for line in resp:
                        now = time.monotonic()
                        event = orjson.loads(line)
                        if event.get("type") == "ERROR":  # 410 Gone: the resourceVersion is too old
                            rv = self._list()
                            break
                        obj = event.get("object") or {}
                        rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                        self.observe(str(event.get("type")), obj, now)
                        if self._stopping.is_set():
                            return
            # a watch cut mid-chunk (kube-apiserver restarted) raises IncompleteRead, an HTTPException
            except (OSError, ValueError, http.client.HTTPException) as exc:
                if self._stopping.is_set():
                    return
                print(f"# pod watch {self.path}: {exc!r}; resuming", file=sys.stderr, flush=True)
                time.sleep(0.1)
            if time.monotonic() - opened < self.timeout_s - 0.5:  # ended before its timeout: forced
                self.restarts += 1
