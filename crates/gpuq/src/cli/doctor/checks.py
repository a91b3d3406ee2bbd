"""gpuq doctor's checks, run where jobs run (as a job when GPUs are asked
for), in the Python the jobs use. Standard library only; PyTorch is looked
for, not required. Prints one JSON document:

  {"version": 1, "node": ..., "python": ..., "gpus_asked": N,
   "checks": [{"id", "title", "status": "ok|warn|fail|skip", "figure", "detail", "fix"}]}

Usage: python checks.py [--gpus N] [--data DIR] [--seconds S] [--driver-cuda X.Y]
(--driver-cuda: the CUDA version the driver supports, as the daemon's NVML reads it)
"""
import json
import os
import platform
import shutil
import subprocess
import sys
import time

GIB = 1024 ** 3
CHECKS = []


def check(id_, title, status, figure=None, detail="", fix=""):
    CHECKS.append({"id": id_, "title": title, "status": status, "figure": figure, "detail": detail, "fix": fix})


def plural(n, noun):
    return "%d %s%s" % (n, noun, "" if n == 1 else "s")


def visible_devices():
    v = os.environ.get("CUDA_VISIBLE_DEVICES")
    if v is None:
        return None
    return [d for d in v.split(",") if d.strip() != ""]


def nvidia_smi():
    """Driver version, the CUDA version it supports, and the GPUs it sees; None without a driver."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        q = subprocess.run([exe, "--query-gpu=driver_version,name,memory.total", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=20)
        head = subprocess.run([exe], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    if q.returncode != 0:
        return {"error": (q.stderr or q.stdout).strip()[:300]}
    rows = [r.split(", ") for r in q.stdout.strip().splitlines() if r.strip()]
    cuda = None
    marker = "CUDA Version:"
    if marker in head:
        cuda = head.split(marker, 1)[1].split()[0]
    return {"driver": rows[0][0] if rows else None, "cuda": cuda, "gpus": [r[1] for r in rows]}


def version_tuple(v):
    try:
        return tuple(int(x) for x in str(v).split(".")[:2])
    except ValueError:
        return None


def check_driver(gpus_asked, smi, nvml_cuda):
    if smi is None and nvml_cuda:
        check("driver", "NVIDIA driver", "warn", None,
              "nvidia-smi is not on the job's PATH; the daemon sees a driver supporting CUDA %s through NVML" % nvml_cuda,
              "install nvidia-smi (it comes with the driver's utilities package) to inspect GPUs from jobs")
        return
    if smi is None:
        status = "fail" if gpus_asked else "warn"
        check("driver", "NVIDIA driver", status, None,
              "no NVIDIA driver on this node (no nvidia-smi): no GPU can be used here",
              "install the NVIDIA driver (e.g. `apt install nvidia-driver`), or run on a GPU node"
              if gpus_asked else "nothing to fix for CPU jobs; GPU checks are skipped")
        return
    if "error" in smi:
        check("driver", "NVIDIA driver", "fail", None, "nvidia-smi fails: " + smi["error"],
              "the driver is installed but not loaded: reboot after a driver update, or check `dmesg` for NVRM errors")
        return
    check("driver", "NVIDIA driver", "ok", smi["driver"],
          "driver %s, supports CUDA up to %s; %s visible: %s"
          % (smi["driver"], smi["cuda"], plural(len(smi["gpus"]), "GPU"), ", ".join(smi["gpus"])))


def check_torch(gpus_asked, smi, nvml_cuda):
    try:
        import torch  # noqa: F401
    except Exception as e:  # an import that fails for any reason is the finding
        check("torch", "PyTorch in the job's Python", "fail" if gpus_asked else "warn", None,
              "%s cannot import torch: %s" % (sys.executable, e),
              "install it in this environment: pip install torch (or name another Python with --python)")
        return None
    built = torch.version.cuda
    check("torch", "PyTorch in the job's Python", "ok", torch.__version__,
          "torch %s (built for CUDA %s) in %s" % (torch.__version__, built or "none: a CPU-only build", sys.executable))
    driver_cuda = (smi or {}).get("cuda") or nvml_cuda
    if driver_cuda and built:
        need, have = version_tuple(built), version_tuple(driver_cuda)
        if need and have and need > have:
            check("torch_cuda", "PyTorch's CUDA against the driver's", "fail", built,
                  "torch is built for CUDA %s; the driver supports up to %s: CUDA will not initialise" % (built, driver_cuda),
                  "install a wheel for CUDA %s or older (pip install torch --index-url "
                  "https://download.pytorch.org/whl/cu%s), or update the driver" % (driver_cuda, driver_cuda.replace(".", "")))
        else:
            check("torch_cuda", "PyTorch's CUDA against the driver's", "ok", built,
                  "built for CUDA %s; the driver supports up to %s" % (built, driver_cuda))
    elif gpus_asked and not built:
        check("torch_cuda", "PyTorch's CUDA against the driver's", "fail", None,
              "this PyTorch is a CPU-only build: it will never use the GPUs it holds",
              "install a CUDA build: pip install torch --index-url https://download.pytorch.org/whl/cu124")
    else:
        check("torch_cuda", "PyTorch's CUDA against the driver's", "skip", built, "no driver or no CUDA build to compare")
    return torch


def check_cuda_devices(gpus_asked, torch):
    visible = visible_devices()
    if torch is None:
        check("cuda_devices", "GPUs seen by PyTorch", "skip", None, "no PyTorch")
        return
    available = torch.cuda.is_available()
    count = torch.cuda.device_count() if available else 0
    want = len(visible) if visible is not None else gpus_asked
    if want == 0:
        check("cuda_devices", "GPUs seen by PyTorch", "ok" if count == 0 else "warn", count,
              "no GPU reserved; torch.cuda.is_available() is %s" % available,
              "" if count == 0 else "a job without GPUs should not see any: set CUDA_VISIBLE_DEVICES= for it")
        return
    if count == want:
        names = [torch.cuda.get_device_name(i) for i in range(count)]
        check("cuda_devices", "GPUs seen by PyTorch", "ok", count,
              "%d reserved, %d seen: %s" % (want, count, ", ".join(names)))
    else:
        check("cuda_devices", "GPUs seen by PyTorch", "fail", count,
              "%s reserved (CUDA_VISIBLE_DEVICES=%s) but torch.cuda.is_available() is %s and it sees %d"
              % (plural(want, "GPU"), ",".join(visible or []), available, count),
              "a job that cannot see its GPUs computes on the CPU: check the driver and the torch build above")


def check_nccl(torch):
    if torch is None or not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        check("nccl_p2p", "NCCL and peer-to-peer between the GPUs", "skip", None,
              "needs two or more GPUs seen by PyTorch")
        return
    n = torch.cuda.device_count()
    try:
        nccl = ".".join(str(x) for x in torch.cuda.nccl.version())
    except Exception as e:
        check("nccl_p2p", "NCCL and peer-to-peer between the GPUs", "fail", None, "no NCCL: %s" % e,
              "a PyTorch build with NCCL (the PyPI CUDA wheels have it) is needed for multi-GPU training")
        return
    missing = [(i, j) for i in range(n) for j in range(n) if i != j and not torch.cuda.can_device_access_peer(i, j)]
    if missing:
        check("nccl_p2p", "NCCL and peer-to-peer between the GPUs", "warn", nccl,
              "NCCL %s; no peer-to-peer access between %s: NCCL goes through host memory (slower all-reduce)"
              % (nccl, ", ".join("%d-%d" % p for p in missing)),
              "ask for GPUs on one NVLink/PCIe switch, or check ACS/IOMMU settings in the BIOS")
    else:
        check("nccl_p2p", "NCCL and peer-to-peer between the GPUs", "ok", nccl,
              "NCCL %s; every pair of the %d GPUs has peer-to-peer access" % (nccl, n))


def cpus():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def mem_total():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_shm(gpus_asked):
    try:
        shm = shutil.disk_usage("/dev/shm").total
    except OSError:
        check("shm", "/dev/shm for DataLoader workers", "warn", None, "no /dev/shm",
              "DataLoader workers pass batches through shared memory: mount a tmpfs at /dev/shm")
        return
    workers = max(1, cpus() // max(1, gpus_asked))
    # A worker keeps a few batches in flight; 256 MiB each is a common need for image batches.
    need = workers * 256 * 1024 ** 2
    figure = round(shm / GIB, 2)
    if shm < need:
        check("shm", "/dev/shm for DataLoader workers", "warn", figure,
              "/dev/shm is %.2f GiB; %d workers per GPU would want about %.1f GiB"
              % (shm / GIB, workers, need / GIB),
              "enlarge it (containers: --shm-size=%dg, or --ipc=host), or use fewer workers" % max(1, round(need / GIB)))
    else:
        check("shm", "/dev/shm for DataLoader workers", "ok", figure,
              "/dev/shm is %.2f GiB, enough for %d workers per GPU" % (shm / GIB, workers))


def check_cpu_memory(gpus_asked):
    n, mem = cpus(), mem_total()
    per = max(1, gpus_asked)
    cores, gib = n / per, (mem / GIB / per) if mem else None
    low = cores < 4 or (gib is not None and gib < 8)
    check("cpu_memory", "CPU cores and memory per GPU" if gpus_asked else "CPU cores and memory",
          "warn" if low and gpus_asked else "ok", {"cores": round(cores, 1), "memory_gib": round(gib, 1) if gib else None},
          ("%s and %s GiB of memory for %s: %.1f cores and %s GiB each"
           % (plural(n, "core"), round(mem / GIB, 1) if mem else "?", plural(gpus_asked, "GPU"), cores,
              round(gib, 1) if gib else "?"))
          if gpus_asked else
          # A CPU job: "for 0 GPUs: 2.0 cores each" would read as nonsense.
          "%s and %s GiB of memory (no GPU asked for; --gpus N gives the figures per GPU)"
          % (plural(n, "core"), round(mem / GIB, 1) if mem else "?"),
          "fewer than 4 cores or 8 GiB per GPU starve the input pipeline: ask for fewer GPUs per job on this node, "
          "or move decoding to the GPU (DALI, torchvision.io.decode_jpeg on cuda)" if low and gpus_asked else "")


def check_data(path, seconds):
    if not path:
        check("data_read", "Read throughput of the data directory", "skip", None, "no --data DIR given")
        return
    if not os.path.isdir(path):
        check("data_read", "Read throughput of the data directory", "fail", None, "%s is not a directory" % path,
              "name the directory your training reads (--data DIR)")
        return
    total, files, start = 0, 0, time.perf_counter()
    buf = bytearray(4 << 20)
    deadline = start + seconds
    for root, _, names in os.walk(path):
        for name in names:
            if time.perf_counter() > deadline:
                break
            try:
                with open(os.path.join(root, name), "rb", buffering=0) as f:
                    while time.perf_counter() < deadline:
                        n = f.readinto(buf)
                        if not n:
                            break
                        total += n
                files += 1
            except OSError:
                continue
        if time.perf_counter() > deadline:
            break
    elapsed = max(time.perf_counter() - start, 1e-6)
    mbs = total / elapsed / 1e6
    if elapsed < seconds and total < 64e6:
        check("data_read", "Read throughput of the data directory", "ok" if total else "warn", round(mbs, 1),
              "%s holds only %.1f MB in %s, read whole in %.2f s: too little to measure a rate"
              % (path, total / 1e6, plural(files, "file"), elapsed), "" if total else "nothing readable there")
        return
    if total == 0:
        check("data_read", "Read throughput of the data directory", "warn", 0, "nothing readable in %s" % path)
        return
    status = "ok" if mbs >= 200 else "warn"
    check("data_read", "Read throughput of the data directory", status, round(mbs, 1),
          "read %.0f MB from %s in %s in %.1f s: %.0f MB/s (files read once may come from the page cache)"
          % (total / 1e6, plural(files, "file"), path, elapsed, mbs),
          "" if status == "ok" else "under 200 MB/s feeds a GPU slowly: copy the data set to local NVMe or /dev/shm "
          "first, or use a packed format (WebDataset, LMDB) instead of many small files")


def main():
    args = sys.argv[1:]

    def opt(name, default=None):
        return args[args.index(name) + 1] if name in args and args.index(name) + 1 < len(args) else default

    gpus = int(opt("--gpus", "0"))
    visible = visible_devices()
    if visible is not None:
        gpus = max(gpus, len(visible))
    smi = nvidia_smi()
    nvml_cuda = opt("--driver-cuda")
    check_driver(gpus, smi, nvml_cuda)
    torch = check_torch(gpus, smi, nvml_cuda)
    check_cuda_devices(gpus, torch)
    check_nccl(torch)
    check_shm(gpus)
    check_cpu_memory(gpus)
    check_data(opt("--data"), float(opt("--seconds", "3")))
    print(json.dumps({
        "version": 1,
        "node": platform.node(),
        "python": sys.executable,
        "gpus_asked": gpus,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "checks": CHECKS,
    }))


if __name__ == "__main__":
    main()
