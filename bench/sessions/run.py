#!/usr/bin/env python3
"""What the notebook proxy costs, measured side by side in one run.

  python bench/sessions/run.py [--requests 500] [--cells 300]

A release daemon (target/release/gpuq, or $GPUQ_BIN) runs a real JupyterLab
as a notebook job (`gpuq notebook`, the jupyter-lab next to this Python).
Then, each against JupyterLab's own socket with its own token (what a user
would get with JupyterLab outside gpuq, minus the network):
  - HTTP: --requests sequential `GET /api/kernels`, through the daemon's proxy
    (TCP, a gpuq token) and straight to JupyterLab's unix socket;
  - a kernel: --cells executions of `1+1` on one WebSocket, each timed from
    the request to the kernel's return to idle, through the proxy and direct.
Reported: medians and 95th percentiles, and proxy/direct ratios.
The direct path needs JupyterLab's token: the daemon derives it (HMAC-SHA256
of its own token and the job id); this script, run by the daemon's owner,
derives the same.
"""
import argparse
import hashlib
import hmac
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import time
import uuid

import websocket  # websocket-client (a JupyterLab dependency)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import GPUQ, Daemon  # noqa: E402


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost")
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def p95(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))]


def http_times(conn, path, headers, n):
    times = []
    for _ in range(n):
        t = time.perf_counter()
        conn.request("GET", path, headers=headers)
        r = conn.getresponse()
        r.read()
        assert r.status == 200, r.status
        times.append(time.perf_counter() - t)
    return times


def cell_times(ws, n):
    times = []
    session = uuid.uuid4().hex
    for _ in range(n):
        msg_id = uuid.uuid4().hex
        ws.send(json.dumps({"header": {"msg_id": msg_id, "username": "b", "session": session,
                                       "msg_type": "execute_request", "version": "5.3", "date": ""},
                            "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
                            "content": {"code": "1+1", "silent": False, "store_history": False,
                                        "user_expressions": {}, "allow_stdin": False}}))
        t = time.perf_counter()
        reply = idle = False
        while not (reply and idle):
            m = json.loads(ws.recv())
            if m.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = m["header"]["msg_type"]
            reply = reply or kind == "execute_reply"
            idle = idle or (kind == "status" and m["content"]["execution_state"] == "idle")
        times.append(time.perf_counter() - t)
    return times


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, default=500)
    p.add_argument("--cells", type=int, default=300)
    a = p.parse_args()
    lab = os.path.join(os.path.dirname(sys.executable), "jupyter-lab")
    d = Daemon(gpus="sim:1")
    try:
        out = subprocess.run([GPUQ, "notebook", "--json", "--jupyter", lab, "--idle-stop", "off"],
                             env=d.env, capture_output=True, text=True, timeout=180, cwd="/tmp", check=True)
        job = json.loads(out.stdout)["job"]
        jtoken = hmac.new(d.token.encode(), f"jupyter token for job {job}".encode(), hashlib.sha256).hexdigest()
        sock = os.path.join(d.home, "jobs", str(job), "session", "jupyter.sock")
        base = f"/sessions/{job}"
        host, port = d.url.removeprefix("http://").split(":")
        via = http.client.HTTPConnection(host, int(port))
        direct = UnixHTTP(sock)
        ours = {"Authorization": "Bearer " + d.token}
        theirs = {"Authorization": "token " + jtoken}
        # Warm both paths, then interleave in rounds so drift hits both alike.
        http_times(via, f"{base}/api/kernels", ours, 20)
        http_times(direct, f"{base}/api/kernels", theirs, 20)
        hv, hd = [], []
        for _ in range(5):
            hv += http_times(via, f"{base}/api/kernels", ours, a.requests // 5)
            hd += http_times(direct, f"{base}/api/kernels", theirs, a.requests // 5)
        via.request("POST", f"{base}/api/kernels", body="{}", headers=dict(ours, **{"Content-Type": "application/json"}))
        kernel = json.loads(via.getresponse().read())["id"]
        ws_path = f"{base}/api/kernels/{kernel}/channels"
        wv = websocket.create_connection(f"ws://{host}:{port}{ws_path}", header=["Authorization: Bearer " + d.token])
        raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        raw.connect(sock)
        wd = websocket.create_connection(f"ws://localhost{ws_path}", socket=raw, header=["Authorization: token " + jtoken])
        cell_times(wv, 20)
        cell_times(wd, 20)
        cv, cd = [], []
        for _ in range(5):
            cv += cell_times(wv, a.cells // 5)
            cd += cell_times(wd, a.cells // 5)
        wv.close()
        wd.close()
        ms = lambda x: x * 1000  # noqa: E731
        rows = [
            ("GET /api/kernels", hv, hd),
            ("kernel: execute 1+1 to idle", cv, cd),
        ]
        print("| | through gpuq's proxy (median / p95) | JupyterLab direct (median / p95) | ratio of medians |")
        print("|---|---|---|---|")
        for name, v, dd in rows:
            print(f"| {name} | {ms(statistics.median(v)):.2f} / {ms(p95(v)):.2f} ms | "
                  f"{ms(statistics.median(dd)):.2f} / {ms(p95(dd)):.2f} ms | "
                  f"{statistics.median(v) / statistics.median(dd):.2f}x |")
        subprocess.run([GPUQ, "cancel", str(job)], env=d.env, capture_output=True, timeout=30)
        d.wait(job)
    finally:
        d.close()


if __name__ == "__main__":
    main()
