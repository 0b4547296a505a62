"""The options grouped by concern (config/groups.py): every TrainConfig option in exactly one group, each group the
config's current values, a checkpoint's settings still the flat options, and the modules still handed the whole
config named here. Fast: nothing is built or trained; the modules are read with `ast`."""

import ast
from dataclasses import FrozenInstanceError, asdict, fields
from pathlib import Path

import pytest

from {{ cookiecutter.project_slug }}.config import TrainConfig
from {{ cookiecutter.project_slug }}.config.groups import GROUPS
from {{ cookiecutter.project_slug }}.fault_tolerance import resume

PROJECT = Path(__file__).resolve().parent.parent
PACKAGE = PROJECT / "{{ cookiecutter.project_slug }}"
OPTIONS = [option.name for option in fields(TrainConfig)]

# The modules outside config/ (the options themselves) and loop/ (which hands the groups out) still handed the whole
# config, and why; every other one is handed the group it reads (`config.data`, ...).
WHOLE_CONFIG = {
    "cli.py": "train.py's command line: it makes the TrainConfig",
    "plan_cli.py": "plan.py's command line: it makes the TrainConfig",
    "plan_compile.py": "plan.py --compile: the run's step as the whole config describes it",
    "plan_rehearsal.py": "plan.py --rehearse: the stand-in data at the run's shapes",
    "rehearse_cli.py": "plan.py --rehearse's staging process: it makes the run's TrainConfig",
    "predict_cli.py": "predict.py's command line: its own PredictConfig, and the bake's TrainConfig defaults",
    "planning/estimate.py": "Recipe.of: a plan's recipe reads the length, the optimizer, precision and checkpointing",
    "planning/rehearsed.py": "recipe_key: the flags of several groups that change a graph but not the Recipe",
    "tasks/{{ cookiecutter.task | replace('-', '_') }}.py": "the task's contract (tasks/__init__.py): it joins data, model and the run's batches",
{%- if cookiecutter.task == "causal-lm" %}
    "tasks/samples.py": "the task's after_export: the export's switch and the samples' count",
{%- endif %}
}


def test_every_option_is_in_exactly_one_group():
    grouped = [option.name for group in GROUPS.values() for option in fields(group)]
    assert sorted(grouped) == sorted(OPTIONS)  # none left out, none twice, none that is no option
    assert not set(GROUPS) & set(OPTIONS)  # a group's property hides no option


def test_each_group_holds_the_config_s_current_values_and_changes_nothing():
    config = TrainConfig(seed=7, lora_r=4, save_steps=3, logging_steps=0, optim="adafactor")
    config.demo = True  # as the notebook decides it, after the config is made
    for name, group in GROUPS.items():
        part = getattr(config, name)
        assert type(part) is group
        assert asdict(part) == {option.name: getattr(config, option.name) for option in fields(group)}
    assert (config.training.seed, config.model.lora_r, config.checkpoints.save_steps, config.watch.logging_steps,
            config.optimizer.optim, config.data.demo) == (7, 4, 3, 0, "adafactor", True)
    assert config.model.resolved_lora_alpha == 8 and config.checkpoints.report_path == config.report_path
    with pytest.raises(FrozenInstanceError):
        config.model.lora_r = 8  # the config is the one place an option is set


def test_a_checkpoint_records_the_flat_options_as_before():
    """settings.json keeps TrainConfig's flat names, so a checkpoint written before the groups resumes (test_resume.py
    resumes one); no group's name is among them."""
    settings = resume.settings_of(asdict(TrainConfig(lora_r=4)), {"task": "the task"})
    assert set(settings) == set(OPTIONS) - set(resume.NOT_SETTINGS) | {"task"}
    assert settings["lora_r"] == 4 and not set(GROUPS) & set(settings)


def takes_whole_config(source: str) -> bool:
    """A module is handed the whole config when it imports TrainConfig or a function takes a parameter `config` (the
    package's name for a run's whole options) or one annotated TrainConfig."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and any(alias.name == "TrainConfig" for alias in node.names):
            return True
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args
            for argument in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs):
                annotation = ast.unparse(argument.annotation) if argument.annotation is not None else ""
                if argument.arg == "config" or "TrainConfig" in annotation:
                    return True
    return False


def test_only_the_named_modules_outside_the_config_and_the_loop_take_the_whole_config():
    found = sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                   if path.relative_to(PACKAGE).parts[0] not in ("config", "loop")
                   and takes_whole_config(path.read_text(encoding="utf-8")))
    assert found == sorted(WHOLE_CONFIG), "hand a module the group it reads (config/groups.py), not the whole config"
    # The check can fail.
    assert takes_whole_config("def f(model, config): pass") and takes_whole_config("def f(c: 'TrainConfig'): pass")
    assert not takes_whole_config("def f(options: DataOptions, model: ModelOptions): pass")
