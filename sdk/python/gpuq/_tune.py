"""The knobs ``gpuq tune`` tries, as a training script reads them."""

from ._env import params

#: What each knob means when a trial does not set it: the script's own defaults win.
KNOBS = ("batch_size", "amp", "compile", "num_workers", "pin_memory", "channels_last")
_AMP = ("off", "bf16", "fp16")


def tune_params(defaults=None):
    """The training knobs of this run: ``defaults`` (the script's own) with what
    ``gpuq tune`` set for this trial on top (from ``GPUQ_PARAMS``).

    Knobs: ``batch_size`` (int), ``amp`` ("off", "bf16", "fp16"), ``compile``
    ("off", or a ``torch.compile`` mode: "default", "reduce-overhead",
    "max-autotune"), ``num_workers`` (int), ``pin_memory`` (bool),
    ``channels_last`` (bool). A value of the wrong type is ignored (the default
    stays): a trial never crashes on its knobs. Other params pass through.
    """
    out = dict(defaults or {})
    for key, value in params().items():
        if key == "batch_size" or key == "num_workers":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != int(value):
                continue
            out[key] = int(value)
        elif key == "amp":
            if value in _AMP:
                out[key] = value
        elif key == "compile":
            if isinstance(value, str) and value:
                out[key] = value
        elif key in ("pin_memory", "channels_last"):
            if isinstance(value, bool):
                out[key] = value
            elif value in ("true", "false"):
                out[key] = value == "true"
        else:
            out[key] = value
    return out
