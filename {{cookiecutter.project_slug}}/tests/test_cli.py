"""The command line: every boolean option takes the bare flag and true/false, and --help says so; every option has a
help of its own."""

import ast
import builtins
import dataclasses
import re

import pytest
from conftest import PROJECT, python_command, run

from {{ cookiecutter.project_slug }}.cli import parse
from {{ cookiecutter.project_slug }}.config import ConfigError, TrainConfig

BOOLEAN_OPTIONS = [field.name for field in dataclasses.fields(TrainConfig) if field.type in (bool, bool | None)]


def test_the_boolean_options_are_the_expected_ones():
    assert sorted(BOOLEAN_OPTIONS) == [
        "checkpoint", "compilation_cache", "demo", "export", "gradient_checkpointing", "kahan_summation", "load_best_model_at_end",
        "lora_frozen_float32", "merge_lora",
        "overwrite_output_dir", "resume",{% if cookiecutter.task == "causal-lm" %} "streaming",{% endif %} "watch_compilations",
    ]


# Options that are errors alone, and what they need beside them.
NEEDS = {"merge_lora": ["--lora_r", "4"], "lora_frozen_float32": ["--lora_r", "4"], "streaming": ["--max_steps", "2"]}


@pytest.mark.parametrize("name", BOOLEAN_OPTIONS)
@pytest.mark.parametrize(("given", "expected"), [([], True), (["true"], True), (["false"], False), (["yes"], True)])
def test_boolean_option_takes_the_bare_flag_and_a_value(name, given, expected):
    assert getattr(parse([*NEEDS.get(name, []), f"--{name}", *given]), name) is expected


@pytest.fixture(scope="module")
def options_help():
    """The options section of --help, white space folded."""
    shown = " ".join(run(python_command("--help", xla=False), timeout=120).stdout.split())
    return shown.split(" options: ", 1)[1]


def test_every_option_has_a_help_and_no_default_said_twice():
    """No flag without a help; "(default: None)" after a help that says its default itself said the opposite."""
    from {{ cookiecutter.project_slug }}.cli import build_parser

    parser = build_parser()
    assert [action.dest for action in parser._actions if not action.help] == []
    formatter = parser._get_formatter()
    shown = {action.dest: formatter._get_help_string(action) for action in parser._actions}
    twice = [action.dest for action in parser._actions
             if "default" in action.help.lower() and shown[action.dest] != action.help]
    assert twice == []
    assert shown["seed"].endswith("(default: %(default)s)")  # argparse's own, where the help gives none
    assert shown["text_column"].startswith("Text column (default: ") and shown["text_column"].endswith(").")


@pytest.mark.parametrize("name", BOOLEAN_OPTIONS)
def test_help_says_how_each_boolean_option_is_written(options_help, name):
    metavar, dashed = name.upper(), name.replace("_", "-")
    # "--name [NAME], --name-with-dashes [NAME] its help" up to the next option
    found = re.search(rf"--{name} \[{metavar}\](?:, --{dashed} \[{metavar}\])? (.+?)(?= --[a-z])", options_help)
    assert found, options_help
    described = found.group(1)
    assert "true or false; the flag alone means true." in described


def test_a_bad_boolean_value_is_named():
    result = run(python_command("--demo", "maybe", xla=False), check=False, timeout=120)
    assert result.returncode == 2
    assert "argument --demo: Truthy value expected: got maybe" in result.stderr


def test_preprocessing_workers_are_a_count_of_processes():
    assert parse(["--preprocessing_num_workers", "3"]).preprocessing_num_workers == 3
    with pytest.raises(ConfigError) as refused:
        TrainConfig(preprocessing_num_workers=0)
    assert str(refused.value) == "preprocessing_num_workers=0: must be a positive whole number"


# Flags the README and docs/ name that are other tools' (no test of this project passes them), and whose.
OTHER_TOOLS = {
    "logdir": "TensorBoard's",
    "tpu_cluster": "accelerate launch's, which the README says not to use",
    "service-account": "gcloud's, in the GKE notes",
    "bench-profile": "the benchmarks' pytest option (benchmarks/conftest.py), run by the template's own suite",
    "xla_dump_hlo_as_text": "XLA's own (XLA_FLAGS), in docs/torch-tpu.md's porting notes",
    # XLA's own, which the quick benchmark profile sets on XLA:CPU (benchmarks/profiles.py), quoted by the reference
    # run's full tables (docs/benchmark-tables.md).
    "xla_cpu_enable_fast_math": "XLA's own (XLA_FLAGS), in docs/benchmark-tables.md",
    "xla_backend_optimization_level": "XLA's own (XLA_FLAGS), in docs/benchmark-tables.md",
    "xla_cpu_use_fusion_emitters": "XLA's own (XLA_FLAGS), in docs/benchmark-tables.md",
}


@pytest.mark.parametrize(("given", "message"), [
    ({"num_epochs": True}, "num_epochs=True: must be a positive whole number"),  # a bool is no count
    ({"gradient_accumulation_steps": 0}, "gradient_accumulation_steps=0: must be a positive whole number"),
    ({"profile_steps": "3-2"}, "profile_steps='3-2': must be A-B, the first and last optimizer step to trace "
                               "(1 <= A <= B), or A alone"),
    ({"resume": True, "overwrite_output_dir": True}, "resume=True and overwrite_output_dir=True: give one of the two "
                                                     "(continue the earlier run, or remove it)"),
    # The best model and early stopping (loop/best_model.py): the task's metrics, a count, evaluations to compare.
    ({"metric_for_best_model": "f1"}, "metric_for_best_model='f1': must be one of "
     "{{ 'loss, perplexity' if cookiecutter.task == 'causal-lm' else 'loss, accuracy, macro_f1, roc_auc' }} (eval_ prefix allowed)"),
    ({"early_stopping_patience": 0}, "early_stopping_patience=0: must be a positive whole number (evaluations)"),
    ({"early_stopping_patience": 2, "num_epochs": 1}, "early_stopping_patience=2: the run evaluates once (num_epochs=1, "
     "no eval_steps), so nothing is compared: give --eval_steps or more --num_epochs"),
    ({"load_best_model_at_end": True, "export": False}, "load_best_model_at_end=True: the best weights are kept for the "
     "export; it needs export=true"),
])
def test_contradictory_or_mistyped_values_are_refused_in_one_line(given, message):
    with pytest.raises(ConfigError) as refused:
        TrainConfig(**given)
    assert str(refused.value) == message


def documents():
    return [PROJECT / "README.md", *sorted((PROJECT / "docs").glob("*.md"))]


def test_every_flag_the_docs_name_is_named_by_a_test():
    """A flag the README or docs/ offers that no test passes or names is a promise nothing holds."""
    docs = "\n".join(path.read_text(encoding="utf-8") for path in documents())
    flags = set(re.findall(r"(?<![\w-])--([a-z][a-z0-9_-]*[a-z0-9])", docs)) - set(OTHER_TOOLS)
    tests = "\n".join(path.read_text(encoding="utf-8") for path in (PROJECT / "tests").glob("*.py"))
    unnamed = sorted(flag for flag in flags if not re.search(rf"(?<!\w){re.escape(flag)}(?![\w-])", tests))
    assert not unnamed, f"README.md or docs/ offer flags no test names: {unnamed}"


def defined_classes() -> dict[str, list[str]]:
    """Every class the package defines, by name, with its bases' names (a dotted base by its last part)."""
    classes = {}
    for path in (PROJECT / "{{ cookiecutter.project_slug }}").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                classes[node.name] = [ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases]
    return classes


def test_every_error_the_package_defines_is_a_user_error():
    """cli.py, predict_cli.py and plan_cli.py catch UserError alone (config/errors.py): an error class beside it would
    reach the user as a stack trace. Private ones (a leading _) are caught where they are raised."""
    classes = defined_classes()

    def ancestors(name: str) -> set[str]:
        return {name}.union(*(ancestors(base) for base in classes.get(name, [])))

    errors = {name for name in classes if any(isinstance(getattr(builtins, base, None), type) and
                                              issubclass(getattr(builtins, base), BaseException)
                                              for base in ancestors(name))}
    assert {"ConfigError", "DataProblem", "CheckpointProblem", "Preempted", "NonFiniteLoss", "CompileFailed"} <= errors
    assert sorted(name for name in errors if "UserError" not in ancestors(name) and not name.startswith("_")) == []


def test_the_exit_codes_a_scheduler_tells_apart():
    from {{ cookiecutter.project_slug }}.fault_tolerance.loss_guard import NonFiniteLoss
    from {{ cookiecutter.project_slug }}.fault_tolerance.preemption import Preempted
    from {{ cookiecutter.project_slug }}.plan_compile import CompileFailed

    assert (ConfigError.exit_code, Preempted.exit_code, NonFiniteLoss.exit_code, CompileFailed.exit_code) == (2, 75, 3, 1)
    assert (ConfigError.said_as, Preempted.said_as) == ("error", "stopped")
