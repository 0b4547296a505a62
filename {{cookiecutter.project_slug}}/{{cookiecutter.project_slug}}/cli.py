"""The command line over `training_function`: `python train.py --help` lists every option.

Known problems (bad flags, bad data files, a missing TPU, an unwritable output
folder) end in one line that says what to do, not in a stack trace.
"""

import argparse
import sys

from transformers import HfArgumentParser

from .config import ConfigError, TrainConfig


def build_parser() -> HfArgumentParser:
    """The options of TrainConfig, each `--no_X` with a help of its own.

    HfArgumentParser adds a `--no_X` (store_false) for every bool field whose default is True, with a copy of
    X's metadata, so its help repeated X's ("Save checkpoints: ...") and showed "(default: False)".
    """
    options = HfArgumentParser(TrainConfig)
    for action in options._actions:
        if isinstance(action, argparse._StoreFalseAction) and action.option_strings[0] == f"--no_{action.dest}":
            action.help = f"The same as --{action.dest} false."
            # Not a default of its own: --{action.dest}'s, added first, is the one argparse uses.
            action.default = argparse.SUPPRESS
    return options


def parse(argv=None) -> TrainConfig:
    parser = build_parser()
    try:
        (config,) = parser.parse_args_into_dataclasses(args=argv)
    except ConfigError as error:
        parser.error(str(error))
    return config


def main(argv=None) -> int:
    """Train; a known problem ends the process with status 2 (a preemption: 75, a non-finite loss: 3) by raising SystemExit.

    Raised, not returned: `accelerate launch` calls `main` itself on XLA (through PrepareForLaunch
    and xmp.spawn) and drops its return value, so a returned 2 would reach the shell as 0.
    """
    config = parse(argv)
    from .data.formats import DataProblem
    from .data.hub import ModelUnavailable
    from .fault_tolerance.checkpointing import CheckpointProblem
    from .fault_tolerance.loss_guard import NonFiniteLoss
    from .fault_tolerance.preemption import Preempted
    from .launch.environment import EnvironmentProblem
    from .launch.processes import is_main_process
    from .loop.training import training_function
    from .precision.levels import PrecisionUnavailable
    from .watch.graph_watch import RecompilationLimit

    try:
        training_function(config=config)
    except (
        ConfigError, DataProblem, CheckpointProblem, EnvironmentProblem, ModelUnavailable, PrecisionUnavailable,
        RecompilationLimit, Preempted, NonFiniteLoss,
    ) as error:
        # A problem that every process raised together is said once, by the main process.
        if not getattr(error, "every_process", False) or is_main_process():
            print(f"{'stopped' if isinstance(error, Preempted) else 'error'}: {error}", file=sys.stderr)
        raise SystemExit(getattr(error, "exit_code", 2)) from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
