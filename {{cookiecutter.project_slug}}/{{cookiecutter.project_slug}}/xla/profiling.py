"""torch_xla's profiler: a trace of chosen steps, written for TensorBoard's profile plugin (xprof).

The trace runs in this process (no profiler server to connect to). Each traced step is marked on the host with a
named event that carries its number, which the profile plugin groups steps by; unlike torch_xla's `StepTrace` it
neither cuts the graph nor names the graph's operations, so a traced step compiles nothing a plain one does not.
"""


def start_trace(folder: str) -> None:
    import torch_xla.debug.profiler as xp

    xp.start_trace(folder)


def stop_trace() -> None:
    """Write the trace to the folder start_trace was given: plugins/profile/<time>/<host>.xplane.pb and a
    trace.json.gz."""
    import torch_xla.debug.profiler as xp

    xp.stop_trace()


def step_marker(step: int):
    """A host-side event named train_step for optimizer step `step`, entered and exited by the caller."""
    import torch_xla

    # `_r=1` marks it as a step for the profile plugin's step view, as torch_xla's StepTrace does.
    return torch_xla._XLAC.profiler.TraceMe("train_step", step_num=step, _r=1)
