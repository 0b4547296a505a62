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
    config = parse(argv)
    from .checkpointing import CheckpointProblem
    from .data import DataProblem
    from .precision import PrecisionUnavailable
    from .runtime import EnvironmentProblem
    from .training import training_function

    try:
        training_function(config=config)
    except (ConfigError, DataProblem, CheckpointProblem, EnvironmentProblem, PrecisionUnavailable) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
