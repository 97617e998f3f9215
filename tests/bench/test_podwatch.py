"""The benches' pod watch thread (also the e2e kubelet stand-in's): it outlives an API server that
cuts a watch response mid-chunk, as kube-apiserver does when it is restarted."""

from __future__ import annotations

import socketserver
import threading
import time

import orjson

from bench.podwatch import PodWatch

LIST = orjson.dumps({"items": [], "metadata": {"resourceVersion": "1"}})
EVENT = orjson.dumps({"type": "ADDED", "object": {"metadata": {"name": "p", "resourceVersion": "2"}}})


class _Api(socketserver.StreamRequestHandler):
    watches = 0

    def handle(self) -> None:
        request = self.rfile.readline().decode()
        while self.rfile.readline() not in (b"\r\n", b""):
            pass
        if "watch=true" not in request:
            self.wfile.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                b"Connection: close\r\n\r\n%s" % (len(LIST), LIST)
            )
            return
        type(self).watches += 1
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        if type(self).watches == 1:
            # a chunk announced and cut short: http.client raises IncompleteRead, not an OSError
            self.wfile.write(head + b'40\r\n{"type":')
            return
        line = EVENT + b"\n"
        self.wfile.write(head + b"%x\r\n%s\r\n" % (len(line), line))
        time.sleep(0.5)


def test_a_watch_cut_mid_chunk_resumes_and_sees_the_next_event() -> None:
    """CI run on f8f687c: the kubelet stand-in's thread died of IncompleteRead while kube-apiserver
    restarted, and every later Terminating pod of the 1.36.2 run stayed unfinished."""
    _Api.watches = 0
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Api)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    seen: list[str] = []
    watch = PodWatch(
        f"http://127.0.0.1:{server.server_address[1]}",
        "/api/v1/pods",
        lambda kind, obj, _t: seen.append(obj["metadata"]["name"]),
        token="t",
        timeout_s=2,
    )
    try:
        watch.start()
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        watch.stop(wait_s=0)
        server.shutdown()
        server.server_close()
    assert seen == ["p"]
    assert _Api.watches >= 2
