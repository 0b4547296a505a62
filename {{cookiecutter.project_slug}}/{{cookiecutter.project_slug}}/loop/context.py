"""What every part of one run is handed, as one object instead of the same five arguments on every call.

A training run builds its `RunContext` once, after the demo is decided (loop/training.py); preparation, the loop,
the report and export read from it. predict.py builds one too, with its own options as `config` and no precision.
"""

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class RunContext:
    accelerator: object  # Accelerate's Accelerator: the device, the processes
    layout: object  # the parallelism layout (parallel/layout.py's Layout): data or fsdp
    config: object  # the run's options: TrainConfig (train.py, the notebook) or PredictConfig (predict.py)
    precision: object = None  # the precision level's report (precision/levels.py); None where nothing trains
    step: object = None  # config/step_function.py's Choice: the whole JAX step or the lazy one; None where nothing trains
    demo: bool = False  # the offline demo: its model built from a config, its data the shipped files
    say: Callable[[str], None] = print  # one voice for every process's messages (launch/processes.say_once)
