"""Graceful stop: turn SIGTERM / SIGUSR1 into a flag that the training loop polls.

When gpuq cancels, preempts or times out a job it sends SIGTERM to the job, waits a grace
period, and then sends SIGKILL. A trainer that calls :func:`should_stop` in its loop can use
the grace period to save a checkpoint and exit (exit code 75 asks gpuq to requeue the job).
"""

import signal
import threading

_stop_requested = False
_installed = False
# The highest step gpuq.log() recorded in this process (see should_stop).
_last_step = None
# The step limit at which the daemon said "pause" (it is not asked twice).
_paused_at = None
_lock = threading.Lock()


def _signals():
    sigs = []
    for name in ("SIGTERM", "SIGUSR1"):
        sig = getattr(signal, name, None)
        if sig is not None:
            sigs.append(sig)
    return sigs


def _handler(signum, frame):
    global _stop_requested
    _stop_requested = True


def install_stop_handler():
    """Install the SIGTERM/SIGUSR1 handlers that make :func:`should_stop` return True.

    The handlers only set a flag: the process is not killed, and previously installed
    handlers are replaced, not chained. Signal handlers can only be installed from the main
    thread; elsewhere (or where signals are unsupported) this does nothing. Calling it again
    is harmless. Returns True when the handlers are in place.
    """
    global _installed
    try:
        if _installed:
            return True
        if threading.current_thread() is not threading.main_thread():
            return False
        with _lock:
            if _installed:
                return True
            for sig in _signals():
                signal.signal(sig, _handler)
            _installed = True
        return True
    except Exception:
        return False


def note_step(step):
    """Called by gpuq.log() with each step it records."""
    global _last_step
    if isinstance(step, int) and not isinstance(step, bool):
        if _last_step is None or step > _last_step:
            _last_step = step


def should_stop():
    """True once gpuq asked the job to stop (SIGTERM or SIGUSR1 was received), or, in
    a sweep trial, once :func:`gpuq.log` recorded the step the trial may train to in
    this attempt (``GPUQ_TRIAL_MAX_STEP``, see :func:`gpuq.trial_max_step`).

    At that step a trial first asks the daemon whether it was promoted at once; if
    so, :func:`gpuq.trial_max_step` grows and this returns False: the trial trains on
    in the same process (so loop on ``trial_max_step()``, read after each step, not on
    a bound taken at the start). Otherwise it returns True: save and exit 0, and the
    trial pauses without holding a GPU.

    The first call installs the signal handlers (see :func:`install_stop_handler`); call it,
    or ``install_stop_handler()``, early in the program so that a signal arriving before the
    first check is caught too. Until then, SIGTERM keeps its default effect.
    """
    global _paused_at
    if not _installed:
        install_stop_handler()
    from ._profile import step as _profile_step

    _profile_step()  # `gpuq profile`: a capture of the next steps, when asked for
    if _stop_requested:
        return True
    from ._env import trial_max_step

    limit = trial_max_step()
    if limit is None or _last_step is None or _last_step < limit:
        return False
    if _paused_at == limit:
        return True
    from ._sweep import train_on

    if train_on(limit) is not None:
        return False
    _paused_at = limit
    return True
