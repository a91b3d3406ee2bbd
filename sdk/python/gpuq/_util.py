"""Small internal helpers shared by the SDK modules."""

import os
import sys

# Keys of the warnings already printed by this process.
_warned = set()


def warn_once(key, message):
    """Print ``message`` to stderr the first time ``key`` is seen. Never raises."""
    try:
        if key in _warned:
            return
        _warned.add(key)
        sys.stderr.write("gpuq: warning: %s\n" % (message,))
        sys.stderr.flush()
    except Exception:
        pass


def getenv(name):
    """Return the environment variable ``name`` stripped, or None when unset or blank."""
    try:
        value = os.environ.get(name)
    except Exception:
        return None
    if value is None:
        return None
    value = value.strip()
    return value or None


def local_dir(*parts):
    """Path of ``./.gpuq/<parts>`` in the current directory (used outside gpuq)."""
    try:
        base = os.getcwd()
    except Exception:
        base = "."
    return os.path.join(base, ".gpuq", *parts)
