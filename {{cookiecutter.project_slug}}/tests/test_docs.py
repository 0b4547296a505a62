"""The docs cannot drift: the README is short and starts with commands that run, and every path they name is there.

The README's demo command is the run conftest.demo_report makes (the whole suite's demo), and its "your own data"
command the one test_pretrained.py trains a saved model with; here its commands are parsed by the project's own
parsers and their data loaded and checked, with nothing trained.
"""

import re

import pytest
from conftest import FIRST_COMMANDS, FIRST_SCREEN, PROJECT, entry_flags, first_screen, load_script, readme_flags

from {{ cookiecutter.project_slug }}.cli import parse

README_LINES = 250
LAYOUT = "{{ cookiecutter.parallelism }}"  # the baked layout, which the README's TPU command follows
INSTALL = ["pip", "install", "-e", ".[xla-cpu,dev]", "-c", "constraints.txt"]  # what CI installs (test_launch.py)


doc_paths = load_script("doc_paths")


def test_the_readme_is_short_and_its_first_screen_has_the_four_commands():
    lines = (PROJECT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_LINES, f"README.md has {len(lines)} lines: move a topic to docs/"
    assert list(first_screen()) == list(FIRST_COMMANDS), f"the README's first {FIRST_SCREEN} lines: {first_screen()}"


def test_every_path_the_readme_docs_and_docstrings_name_is_there():
    assert doc_paths.missing(PROJECT) == []


def test_a_wrong_path_is_found(tmp_path):
    """The check itself: a module named where it is not, in a doc and in a docstring, is reported; one that is
    there is not."""
    package = PROJECT / "{{ cookiecutter.project_slug }}"
    tree = doc_paths.Tree([PROJECT, package], package)
    doc = tmp_path / "doc.md"
    doc.write_text("The loop is `<pkg>/loop/training.py`, not `<pkg>/training.py` nor `loop/trainer.py`; "
                   "see [it](nowhere.md) and [here](#no-such-heading).\n\n# A heading\n", encoding="utf-8")
    assert tree.missing_in_markdown(doc) == [f"{doc}: {name}" for name in
                                             ("<pkg>/training.py", "loop/trainer.py", "nowhere.md", "#no-such-heading")]
    source = tmp_path / "module.py"
    source.write_text('"""Built by {{ cookiecutter.project_slug }}/modeling.py and models/modeling.py."""\n')
    assert tree.missing_in_docstrings(source) == [f"{source}: {{ cookiecutter.project_slug }}/modeling.py"]


def test_the_install_command_is_the_one_ci_runs_with_extras_the_project_has():
    variables, argv = first_screen()["install"]
    assert (variables, argv) == ({}, INSTALL)
    # pyproject.toml's extras, one `name = [` a line (tomllib is Python 3.11's; the project runs on 3.10 too).
    extras = set(re.findall(r"^([\w-]+) = \[", (PROJECT / "pyproject.toml").read_text(), flags=re.MULTILINE))
    assert {"xla-cpu", "dev", "tpu"} <= extras and (PROJECT / "constraints.txt").is_file()


def test_the_demo_command_is_the_demo_on_the_cpu_s_xla_device(monkeypatch):
    """What conftest.demo_report runs (with its precision level and output folder), in the environment of every run:
    the hub out of reach, so the demo (test_training.py asserts the run says so)."""
    from {{ cookiecutter.project_slug }}.data.sources import wants_demo

    variables, argv = first_screen()["the demo"]
    assert variables == {"PJRT_DEVICE": "CPU", "HF_HUB_OFFLINE": "1"} and argv[0] == "python"
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    config = parse(readme_flags("the demo"))
    assert wants_demo(config.data, config.model)


@pytest.mark.parametrize("role", ["your own data", "on a TPU"])
def test_the_data_commands_parse_and_their_files_pass_the_checks(role):
    """Each flag is the project's, and the README's train.csv and eval.csv (here the demo's) load as the run loads
    them, every row checked and tokenized (the demo's tokenizer: no download)."""
    from {{ cookiecutter.project_slug }}.tasks import task

    config = parse(readme_flags(role))
    assert config.train_file and config.eval_file
    data, _, train, evaluation = task.load_examples(config, demo=True)
    assert data.source == "files" and len(train) and len(evaluation)


def test_the_tpu_command_is_one_process_per_host_and_the_per_chip_launcher_is_accelerate_s():
    """Both layouts: on a TPU VM one process drives every chip (SPMD), as the first screen says. The data layout's
    other launcher, one process per chip, is an Accelerate config of the XLA kind."""
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.utils import DistributedType

    variables, argv = first_screen()["on a TPU"]
    assert variables == {"PJRT_DEVICE": "TPU"}
    launcher, _ = entry_flags(argv)
    assert launcher[0] == "python", launcher
    if LAYOUT == "data":
        assert "accelerate launch --config_file configs/tpu-vm.yaml" in (PROJECT / "README.md").read_text()
        assert load_config_from_file(str(PROJECT / "configs" / "tpu-vm.yaml")).distributed_type == DistributedType.XLA
