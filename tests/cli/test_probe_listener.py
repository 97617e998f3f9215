"""`serve --probe-host`: health and metrics on a second address (the pod IP in a pod), the verbs never."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import yaml

from tests.builders import make_node


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch(url: str, data: bytes | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, data=data, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_probe_address_serves_health_and_metrics_only(tmp_path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(make_node("n000")))
    port, probe = free_port(), free_port()
    args = ["serve", "--cluster", str(cluster), "--port", str(port)]
    args += ["--probe-host", "127.0.0.1", "--probe-port", str(probe)]
    proc = subprocess.Popen([sys.executable, "-m", "extender", *args], stderr=subprocess.PIPE, text=True)
    try:
        main, side = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{probe}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if fetch(side + "/readyz")[0] == 200:
                    break
            except OSError:
                time.sleep(0.2)
        assert fetch(side + "/healthz") == (200, "ok\n")
        assert fetch(side + "/readyz")[0] == 200
        status, metrics = fetch(side + "/metrics")
        assert status == 200 and "gang_extender_request_seconds" in metrics
        body = json.dumps({"Pod": {"metadata": {"name": "p", "namespace": "default"}}, "NodeNames": ["n000"]})
        for path, data in (("/filter", body.encode()), ("/bind", b"{}"), ("/debug/gangs", None)):
            status, text = fetch(side + path, data)
            assert status == 404 and "only /healthz, /readyz and /metrics" in text, (path, status, text)
        assert fetch(main + "/debug/gangs")[0] == 200  # the verbs' own address serves everything
        assert fetch(main + "/healthz")[0] == 200
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def test_a_probe_address_that_cannot_be_bound_exits_2(tmp_path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(make_node("n000")))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        busy = taken.getsockname()[1]
        args = ["serve", "--cluster", str(cluster), "--port", "0"]
        args += ["--probe-host", "127.0.0.1", "--probe-port", str(busy)]
        proc = subprocess.run(
            [sys.executable, "-m", "extender", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 2, proc.stderr[-400:]
    assert f"cannot listen on 127.0.0.1:{busy} (--probe-host/--probe-port)" in proc.stderr
