"""A notebook client for the tests: starts a kernel through gpuq's proxy and
runs code in it over the kernel's WebSocket, the way JupyterLab does.

    python kernel_client.py BASE_URL NOTEBOOK_PATH TOKEN CODE [--keep-open SECONDS] [--no-wait]

NOTEBOOK_PATH: where the notebook is served, `/sessions/JOB/CAPABILITY/` (its
`path` in `GET /v1/sessions/JOB`, without `lab`).

Prints one JSON line: {"kernel": id, "stdout": what the code printed, "status": "ok"|"error"}.
"""
import argparse
import json
import sys
import time
import urllib.request
import uuid

import websocket  # websocket-client, a dependency of jupyter_server


def request(method, url, token, body=None):
    req = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode())
    req.add_header("Authorization", f"Bearer {token}")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read() or b"null")


def message(msg_type, content, session):
    return {
        "header": {"msg_id": uuid.uuid4().hex, "username": "test", "session": session,
                   "msg_type": msg_type, "version": "5.3", "date": ""},
        "parent_header": {}, "metadata": {}, "content": content, "channel": "shell", "buffers": [],
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("base")
    p.add_argument("path")
    p.add_argument("token")
    p.add_argument("code")
    p.add_argument("--keep-open", type=float, default=0)
    p.add_argument("--kernel")
    p.add_argument("--no-wait", action="store_true", help="send the code and disconnect at once")
    a = p.parse_args()
    root = a.base + a.path.rstrip("/")
    kernel = a.kernel or request("POST", f"{root}/api/kernels", a.token, {})["id"]
    ws_url = root.replace("http://", "ws://") + f"/api/kernels/{kernel}/channels"
    ws = websocket.create_connection(ws_url, header=[f"Authorization: Bearer {a.token}"], timeout=30)
    session = uuid.uuid4().hex
    req = message("execute_request", {"code": a.code, "silent": False, "store_history": True,
                                      "user_expressions": {}, "allow_stdin": False, "stop_on_error": True}, session)
    ws.send(json.dumps(req))
    if a.no_wait:
        # Until the kernel says it is busy: then the cell is running for sure.
        while True:
            m = json.loads(ws.recv())
            if m["header"]["msg_type"] == "status" and m["content"]["execution_state"] == "busy":
                break
        ws.close()
        print(json.dumps({"kernel": kernel}))
        return
    out, status, idle = [], None, False
    deadline = time.time() + 120
    # Done when both the reply and the kernel's return to idle came (in either order).
    while time.time() < deadline and not (status and idle):
        m = json.loads(ws.recv())
        if m.get("parent_header", {}).get("msg_id") != req["header"]["msg_id"]:
            continue
        kind = m["header"]["msg_type"]
        if kind == "stream":
            out.append(m["content"]["text"])
        elif kind == "execute_reply":
            status = m["content"]["status"]
        elif kind == "status" and m["content"]["execution_state"] == "idle":
            idle = True
    if a.keep_open:
        time.sleep(a.keep_open)
    ws.close()
    print(json.dumps({"kernel": kernel, "stdout": "".join(out), "status": status}))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
