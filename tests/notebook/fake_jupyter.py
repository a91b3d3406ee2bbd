"""A stand-in for jupyter-lab in the root tests (the real one lives in a
virtual environment other accounts cannot read): it listens where gpuq tells
it (--ServerApp.sock, and the base URL in GPUQ_NOTEBOOK_BASE_URL, which gpuq's
settings file on JUPYTER_CONFIG_PATH hands to JupyterLab) and checks
JupyterLab's token (JUPYTER_TOKEN) as JupyterLab does. With GPUQ_FAKE_LINK=PATH it serves
nothing and puts a symlink to PATH where its socket should be: an attack."""
import http.server
import json
import os
import socketserver
import sys
import time

args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
sock = args["ServerApp.sock"]
base = os.environ["GPUQ_NOTEBOOK_BASE_URL"]
# gpuq's settings file for JupyterLab is where JUPYTER_CONFIG_PATH says.
config_dir = os.environ["JUPYTER_CONFIG_PATH"].split(os.pathsep)[0]
assert "c.ServerApp.base_url" in open(os.path.join(config_dir, "jupyter_server_config.py")).read()
link = os.environ.get("GPUQ_FAKE_LINK")
if link:
    os.symlink(link, sock)
    time.sleep(600)
    sys.exit(0)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.headers.get("Authorization") != "token " + os.environ["JUPYTER_TOKEN"]:
            self.send_response(403)
            self.end_headers()
            return
        body = json.dumps([] if self.path == base + "api/kernels" else {"uid": os.getuid(), "path": self.path})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *a):
        pass


class Server(socketserver.UnixStreamServer):
    def get_request(self):
        request, _ = super().get_request()
        return request, ("unix", 0)


os.umask(0o077)
# A socket left by an earlier attempt is replaced, as JupyterLab (tornado) does.
if os.path.exists(sock):
    os.remove(sock)
Server(sock, Handler).serve_forever()
