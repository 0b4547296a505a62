"""The command line over `training_function`: `python train.py --help` lists every option.

Known problems (bad flags, bad data files, a missing TPU, an unwritable output
folder) end in one line that says what to do, not in a stack trace.
"""

import sys

from transformers import HfArgumentParser

from .config import ConfigError, TrainConfig


def parse(argv=None) -> TrainConfig:
    parser = HfArgumentParser(TrainConfig)
    try:
        (config,) = parser.parse_args_into_dataclasses(args=argv)
    except ConfigError as error:
        parser.error(str(error))
    return config


def main(argv=None) -> int:
    """Train; a known problem ends the process with status 2 (a preemption: 75) by raising SystemExit.

    Raised, not returned: `accelerate launch` calls `main` itself on XLA (through PrepareForLaunch
    and xmp.spawn) and drops its return value, so a returned 2 would reach the shell as 0.
    """
    config = parse(argv)
    from .checkpointing import CheckpointProblem
    from .data import DataProblem
    from .graph_watch import RecompilationLimit
    from .modeling import ModelUnavailable
    from .precision import PrecisionUnavailable
    from .preemption import Preempted
    from .runtime import EnvironmentProblem, is_main_process
    from .training import training_function

    try:
        training_function(config=config)
    except (
        ConfigError, DataProblem, CheckpointProblem, EnvironmentProblem, ModelUnavailable, PrecisionUnavailable,
        RecompilationLimit, Preempted,
    ) as error:
        # A problem that every process raised together is said once, by the main process.
        if not getattr(error, "every_process", False) or is_main_process():
            print(f"{'stopped' if isinstance(error, Preempted) else 'error'}: {error}", file=sys.stderr)
        raise SystemExit(getattr(error, "exit_code", 2)) from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
