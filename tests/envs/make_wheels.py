"""Writes tiny pure-Python wheels into DIR, for offline environment tests:
gpuqdemo 1.0 and 2.0, or the VERSIONs given (module gpuqdemo with VERSION).
Usage: make_wheels.py DIR [VERSION...]"""
import base64
import hashlib
import pathlib
import sys
import zipfile


def wheel(out, name, version):
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": f"VERSION = {version!r}\n",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: gpuq-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    with zipfile.ZipFile(out / f"{name}-{version}-py3-none-any.whl", "w") as z:
        for path, text in files.items():
            data = text.encode()
            z.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{path},sha256={digest},{len(data)}")
        record.append(f"{info}/RECORD,,")
        z.writestr(f"{info}/RECORD", "\n".join(record) + "\n")


out = pathlib.Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
for v in sys.argv[2:] or ("1.0", "2.0"):
    wheel(out, "gpuqdemo", v)
