"""Bad answers are refused before anything is written; awkward free text stays data.

Two levels: `validate` from hooks/pre_gen_project.py, rendered with cookiecutter's
own Jinja environment and imported (fast, one case per rule); and real bakes
through cookiecutter's API and its command line, which prove the refusal reaches
the user as one line naming the field and leaves nothing behind.
"""

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
import yaml
from cookiecutter.environment import StrictEnvironment
from cookiecutter.exceptions import (
    FailedHookException,
    OutputDirExistsException,
    UndefinedVariableInTemplate,
)
from cookiecutter.generate import generate_context
from cookiecutter.main import cookiecutter
from cookiecutter.prompt import prompt_for_config

from tests.baking import TEMPLATE

SLUG = "odd_text"
# Quotes, backslashes, shell metacharacters and non-ASCII: legal, and must arrive verbatim.
AWKWARD = {
    "project_name": "Zoë's \"quoted\" \\path\\ \\n 中文 <b>&amp;</b> 100% \"\"\" \"",
    "description": "Trailing backslash, 'single' and \"double\" quotes; `uname`; echo $HOME | cat \\",
    "author": "O'Brien \"Bob\" Müller-Straße 李",
}


def default_answers() -> dict:
    context = generate_context(context_file=str(TEMPLATE / "cookiecutter.json"))
    return dict(prompt_for_config(context, no_input=True))


@pytest.fixture(scope="module")
def hook(tmp_path_factory):
    """hooks/pre_gen_project.py rendered as cookiecutter would render it, then imported."""
    source = (TEMPLATE / "hooks" / "pre_gen_project.py").read_text()
    env = StrictEnvironment(context={"cookiecutter": {}})
    rendered = tmp_path_factory.mktemp("hook") / "pre_gen_project.py"
    rendered.write_text(env.from_string(source).render(cookiecutter=default_answers()))
    spec = importlib.util.spec_from_file_location("pre_gen_project", rendered)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def answers():
    return default_answers()


def test_defaults_are_accepted(hook, answers):
    hook.validate(answers)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("project_slug", "1st_model"),
        ("project_slug", "My-Model"),
        ("project_slug", "my model"),
        ("project_slug", ""),
        ("project_slug", "café"),
        ("project_slug", "_private"),  # distribution name "-private" is not installable
        ("project_slug", "trailing_"),
        ("project_slug", "class"),  # keyword
        ("project_slug", "lambda"),
        ("project_slug", "torch"),  # shadows what the project imports
        ("project_slug", "transformers"),
        ("project_slug", "json"),  # standard library
        *[(field, bad) for field in ("num_labels", "train_batch_size", "eval_batch_size") for bad in ("0", "-8")],
        ("max_seq_length", "1.5"),
        ("max_seq_length", "long"),
        ("num_epochs", "016"),  # pasted into Python, a leading zero is a syntax error
        ("num_epochs", ""),
        ("num_processes", "0"),
        ("num_processes", "eight"),
        ("num_labels", True),
        ("learning_rate", "0"),
        ("learning_rate", "-2e-5"),
        ("learning_rate", "fast"),
        ("learning_rate", "inf"),
        ("learning_rate", "nan"),
        ("learning_rate", "1e-400"),  # rounds to 0.0
        ("learning_rate", "１e-5"),  # float() takes full-width digits, Python source does not
        ("learning_rate", "010"),
        ("learning_rate", "2e-5\n"),
        ("learning_rate", "1j"),
        ("learning_rate", "True"),
        ("variants", "all"),
        ("mixed_precision", "fp16"),
        ("pure_bf16", "yes"),  # a choice now, not the old yes/no downcast_bf16
        ("pure_bf16", True),
        ("parallelism", "ddp"),
        ("shared_model", "maybe"),
        ("project_name", ""),
        ("project_name", "two\nlines"),
        ("description", "carriage\rreturn"),
        ("author", "nul\x00byte"),
        ("author", "ansi \x1b[31mred"),
        ("description", "next\x85line"),  # C1 NEL: a line break to Python
        ("description", "line\u2028separator"),
        ("model_name_or_path", "bert\nbase"),
    ],
)
def test_bad_answer_is_refused_naming_the_field(hook, answers, field, value):
    with pytest.raises(hook.AnswerError, match=f"^{field}="):
        hook.validate({**answers, field: value})


@pytest.mark.parametrize("pure", ["xla", "downcast", "cast"])
def test_pure_bf16_needs_bf16(hook, answers, pure):
    """Pure bf16 weights are a kind of bf16: with mixed_precision=no (float32 throughout) they are refused."""
    with pytest.raises(hook.AnswerError, match=rf"^pure_bf16='{pure}' is not allowed: no, unless mixed_precision=bf16$"):
        hook.validate({**answers, "pure_bf16": pure, "mixed_precision": "no"})
    hook.validate({**answers, "pure_bf16": pure, "mixed_precision": "bf16"})


def test_float32_takes_pure_bf16_no(hook, answers):
    hook.validate({**answers, "pure_bf16": "no", "mixed_precision": "no"})


@pytest.mark.parametrize(
    ("field", "value"),
    [("learning_rate", "3e-4"), ("learning_rate", 5e-5), ("learning_rate", "0.1"), ("num_epochs", " 4 "),
     ("project_slug", "a"), ("project_slug", "my_model2"), ("author", "Tab\tseparated")],
)
def test_good_answer_is_accepted(hook, answers, field, value):
    hook.validate({**answers, field: value})


def snapshot(folder: Path) -> dict:
    """Every path under folder with its bytes and mode: "as it was" means equal snapshots."""
    if not folder.exists():
        return {}
    return {
        str(path.relative_to(folder)): (path.read_bytes() if path.is_file() else None, path.stat().st_mode)
        for path in sorted(folder.rglob("*"))
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("project_slug", "torch"),
        ("project_slug", "class"),
        ("project_slug", "Bad-Name"),
        ("num_epochs", "0"),
        ("train_batch_size", "-8"),
        ("max_seq_length", "1.5"),
        ("learning_rate", "fast"),
        ("num_processes", "many"),
        ("project_name", "two\nlines"),
        ("project_name", "a line\u2028separator"),
    ],
)
def test_bake_refuses_bad_answer_and_writes_nothing(tmp_path, capfd, field, value):
    output = tmp_path / "out"
    with pytest.raises(FailedHookException):
        cookiecutter(str(TEMPLATE), no_input=True, extra_context={field: value}, output_dir=str(output))
    errors = [line for line in capfd.readouterr().err.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and errors[0].startswith(f"ERROR: {field}="), errors
    assert snapshot(output) == {}


@pytest.mark.parametrize("pure", ["xla", "downcast", "cast"])
def test_bake_refuses_pure_bf16_without_bf16(tmp_path, capfd, pure):
    """One line naming the answer and the rule, and no half-made project."""
    output = tmp_path / "out"
    with pytest.raises(FailedHookException):
        cookiecutter(
            str(TEMPLATE), no_input=True, output_dir=str(output),
            extra_context={"mixed_precision": "no", "pure_bf16": pure},
        )
    errors = [line for line in capfd.readouterr().err.splitlines() if line.startswith("ERROR:")]
    assert errors == [f"ERROR: pure_bf16='{pure}' is not allowed: no, unless mixed_precision=bf16"]
    assert snapshot(output) == {}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("variants", "all", "choices are"),
        ("mixed_precision", "fp16", "choices are"),
        ("pure_bf16", "yes", "choices are"),
        ("parallelism", "ddp", "choices are"),
        ("include_benchmarks", "maybe", "could not be converted to a boolean"),
    ],
)
def test_bad_choice_is_refused_by_cookiecutter_before_writing(tmp_path, field, value, message):
    """Choices and yes/no are checked by cookiecutter itself, before the hook: a ValueError naming the field."""
    output = tmp_path / "out"
    with pytest.raises(ValueError, match=f"{value} provided for .*{field}.*{message}"):
        cookiecutter(str(TEMPLATE), no_input=True, extra_context={field: value}, output_dir=str(output))
    assert snapshot(output) == {}


def assert_valid_and_verbatim(project: Path, slug: str, expected: dict) -> None:
    """Every generated data/code file parses, and the free text inside is exactly `expected`."""
    for path in project.rglob("*"):
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8") if path.suffix in {".py", ".json", ".ipynb", ".toml", ".yml", ".yaml"} else None
        if path.suffix == ".py":
            ast.parse(text, filename=str(path))
        elif path.suffix in (".json", ".ipynb"):
            json.loads(text)
        elif path.suffix == ".toml":
            tomllib.loads(text)
        elif path.suffix in (".yml", ".yaml"):
            list(yaml.safe_load_all(text))
    project_table = tomllib.loads((project / "pyproject.toml").read_text())["project"]
    assert project_table["description"] == expected["description"]
    assert project_table["authors"] == [{"name": expected["author"]}]
    recorded = json.loads((project / ".cruft.json").read_text())["context"]["cookiecutter"]
    for field in ("project_name", "description", "author"):
        assert recorded[field] == expected[field]
    docstring = ast.get_docstring(ast.parse((project / slug / "__init__.py").read_text()))
    assert docstring.startswith(expected["project_name"] + ": ")


def test_awkward_free_text_stays_valid_and_verbatim(tmp_path):
    project = Path(cookiecutter(
        str(TEMPLATE), no_input=True, output_dir=str(tmp_path / "out"),
        extra_context={**AWKWARD, "project_slug": SLUG},
    ))
    assert_valid_and_verbatim(project, SLUG, AWKWARD)


def test_characters_beyond_the_basic_multilingual_plane_are_kept(tmp_path):
    """Emoji in the free text: written as typed into Python, TOML, JSON and the notebook, each still valid.

    Jinja's default `tojson` would write them as surrogate escapes (lone surrogates in Python, an error in
    TOML); hooks/jinja_unicode.py makes it write the characters themselves.
    """
    answers = {"project_name": "Rocket 🚀 Classifier", "description": "Fast 🚀 fine-tuning, naïve 😀", "author": "Zoë 🦊"}
    project = Path(cookiecutter(
        str(TEMPLATE), no_input=True, output_dir=str(tmp_path / "out"), extra_context={**answers, "project_slug": SLUG},
    ))
    assert_valid_and_verbatim(project, SLUG, answers)
    assert "\\ud83d" not in (project / "pyproject.toml").read_text() + (project / SLUG / "__init__.py").read_text()


def test_shell_metacharacters_are_never_run(tmp_path):
    """Command substitutions in every free-text answer: the hooks treat them as text, so no file appears."""
    sentinels = [tmp_path / f"SENTINEL{index}" for index in range(3)]
    answers = {
        "project_name": f"$(touch {sentinels[0]})",
        "description": f"`touch {sentinels[1]}`; touch {sentinels[2]} && echo done",
        "author": f"x'; touch {sentinels[2]}; echo '",
    }
    project = Path(cookiecutter(
        str(TEMPLATE), no_input=True, output_dir=str(tmp_path / "out"), extra_context={**answers, "project_slug": SLUG},
    ))
    assert_valid_and_verbatim(project, SLUG, answers)
    assert [path for path in sentinels if path.exists()] == []


def test_braces_in_extra_context_are_rendered_by_cookiecutter(tmp_path):
    """What really happens: cookiecutter renders every answer given as extra_context (or `key=value` on its
    command line) as a Jinja template before any hook runs. `{{ 6 * 7 }}` arrives as 42, `{% raw %}` keeps
    braces, and a reference to an unknown variable stops the bake before anything is written."""
    answers = {
        "project_name": "Sum {{ 6 * 7 }}",
        "description": "Literal {% raw %}{{ braces }}{% endraw %} kept",
        "author": "A",
    }
    project = Path(cookiecutter(
        str(TEMPLATE), no_input=True, output_dir=str(tmp_path / "out"), extra_context={**answers, "project_slug": SLUG},
    ))
    assert_valid_and_verbatim(
        project, SLUG, {"project_name": "Sum 42", "description": "Literal {{ braces }} kept", "author": "A"}
    )
    with pytest.raises(UndefinedVariableInTemplate):
        cookiecutter(
            str(TEMPLATE), no_input=True, output_dir=str(tmp_path / "second"),
            extra_context={"project_name": "{{ cookiecutter.nothing_here }}"},
        )
    assert snapshot(tmp_path / "second") == {}


def test_typed_answers_are_kept_literally(tmp_path):
    """Typed at the prompt (here: piped to cookiecutter's command line), braces and $(...) stay text."""
    sentinel = tmp_path / "SENTINEL"
    typed = {
        "project_name": f"Braces {{{{ 6 * 7 }}}} {{% if true %}}x{{% endif %}} $(touch {sentinel})",
        "project_slug": SLUG,
        "description": "{{ cookiecutter.author }} and `touch " + str(sentinel) + "`",
        "author": "Ünïcode \"quoted\" \\ author",
    }
    # The task comes first (a blank line: its default); blank lines accept the defaults of every later question.
    stdin = "\n".join(["", *typed.values(), *[""] * 30]) + "\n"
    result = subprocess.run(
        [sys.executable, "-m", "cookiecutter", str(TEMPLATE), "--output-dir", str(tmp_path / "out")],
        input=stdin, capture_output=True, text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"}, check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert_valid_and_verbatim(tmp_path / "out" / SLUG, SLUG, typed)
    assert not sentinel.exists()


def test_bake_into_existing_folder_fails_and_leaves_it_alone(tmp_path):
    output = tmp_path / "out"
    existing = output / "tpu_text_classifier"
    (existing / "notes").mkdir(parents=True)
    (existing / "notes" / "mine.txt").write_text("my work, not the template's\n")
    (existing / "pyproject.toml").write_text("[project]\nname = 'already-here'\n")
    before = snapshot(output)
    with pytest.raises(OutputDirExistsException, match="tpu_text_classifier"):
        cookiecutter(str(TEMPLATE), no_input=True, output_dir=str(output))
    assert snapshot(output) == before
