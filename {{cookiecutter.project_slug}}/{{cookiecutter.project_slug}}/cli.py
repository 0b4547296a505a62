"""The command line over `training_function`: `python train.py --help` lists every option.

Known problems (bad flags, bad data files, a missing TPU, an unwritable output
folder) end in one line that says what to do, not in a stack trace.
"""

import argparse
import difflib
import sys

from transformers import HfArgumentParser

from .config import ConfigError, TrainConfig, UserError


class _DefaultUnlessSaid(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's "(default: X)" after each help, except where the help gives its default itself: a default of None
    means "decided at run time", and "(default: None)" after "Default: ..." said the opposite."""

    def _get_help_string(self, action):
        return action.help if "default" in (action.help or "").lower() else super()._get_help_string(action)


def build_parser(*more) -> HfArgumentParser:
    """The options of TrainConfig (and of the dataclasses `more`, plan.py's), each `--no_X` with a help of its own.

    HfArgumentParser adds a `--no_X` (store_false) for every bool field whose default is True, with a copy of
    X's metadata, so its help repeated X's ("Save checkpoints: ...") and showed "(default: False)".
    """
    # No abbreviations: argparse would take --lr for --lr_scheduler_type, and --learning for --learning_rate.
    options = HfArgumentParser((TrainConfig, *more), allow_abbrev=False, formatter_class=_DefaultUnlessSaid)
    for action in options._actions:
        if isinstance(action, argparse._StoreFalseAction) and action.option_strings[0] == f"--no_{action.dest}":
            action.help = f"The same as --{action.dest} false."
            # Not a default of its own: --{action.dest}'s, added first, is the one argparse uses.
            action.default = argparse.SUPPRESS
    return options


# Flags this project had, and what replaced them.
REPLACED = {"--downcast_bf16": "--pure_bf16 downcast"}
# Names that recipes (transformers' Trainer, TRL, Accelerate's examples) give the options this project spells otherwise.
RECIPE_NAMES = {
    "--lr": "--learning_rate", "--num_train_epochs": "--num_epochs", "--epochs": "--num_epochs",
    "--per_device_train_batch_size": "--train_batch_size", "--batch_size": "--train_batch_size",
    "--per_device_eval_batch_size": "--eval_batch_size", "--model": "--model_name_or_path",
    "--dataset_name": "--dataset", "--max_length": "--max_seq_length", "--bf16": "--mixed_precision bf16",
}


def unknown_flag(parser, remaining: list[str]) -> str:
    """One line for the first argument the parser did not take: what replaced it, or the closest known flag."""
    given = next((arg for arg in remaining if arg.startswith("-")), remaining[0])
    flag = given.split("=", 1)[0]
    if flag in REPLACED:
        return f"{flag} is no longer an option: use {REPLACED[flag]}"
    if not flag.startswith("-"):
        return f"unexpected argument {given!r}: every option is a --flag (python train.py --help lists them)"
    known = [option for action in parser._actions for option in action.option_strings]
    closest = RECIPE_NAMES.get(flag) or next(iter(difflib.get_close_matches(flag, known, n=1)), None)
    return f"unknown option {flag}" + (f": did you mean {closest}?" if closest else " (python train.py --help lists them)")


def parse(argv=None) -> TrainConfig:
    parser = build_parser()
    try:
        config, remaining = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    except ConfigError as error:
        parser.error(str(error))
    if remaining:
        parser.error(unknown_flag(parser, remaining))
    return config


def main(argv=None) -> int:
    """Train; a known problem ends the process with status 2 (a preemption: 75, a non-finite loss: 3) by raising SystemExit.

    Raised, not returned: `accelerate launch` calls `main` itself on XLA (through PrepareForLaunch
    and xmp.spawn) and drops its return value, so a returned 2 would reach the shell as 0.
    """
    config = parse(argv)
    from .launch.environment import check_stack
    from .launch.processes import is_main_process

    try:
        check_stack()  # before the training code's imports (seconds): a stack that cannot run says so at once
        from .loop.training import training_function

        training_function(config=config)
    except UserError as error:  # every known problem (config/errors.py); anything else is a bug, with its trace
        # A problem that every process raised together is said once, by the main process; the hosts then leave together.
        if not error.every_process or is_main_process():
            print(f"{error.said_as}: {error}", file=sys.stderr)
        if error.every_process:
            from .launch.main_process import leave_together

            leave_together()
        raise SystemExit(error.exit_code) from None
    return 0


if __name__ == "__main__":
    sys.exit(main())
