"""predict.py: an exported model over a file{% if cookiecutter.task != "causal-lm" %} on the device, in one graph per batch shape, each row once and
in input order, as the run's own evaluation labelled it{% else %}, each prompt continued once and in input order{% endif %}; bad input is one line, exit status 2 and no output
file.
"""

import csv
import json

import pytest
{%- if cookiecutter.task != "causal-lm" %}
from conftest import (
    NO_XLA_PRELUDE,
    PARALLELISM,
    PROJECT,
    child_env,
    free_port,
    python_code,
    python_command,
    quick,
    run,
    spmd_env,
)
{%- else %}
from conftest import python_command, run
{%- endif %}

from {{ cookiecutter.project_slug }} import predict_cli

PREDICT = "{{ cookiecutter.project_slug }}.predict_cli"
{%- if cookiecutter.task != "causal-lm" %}
EVAL_FILE = PROJECT / "data" / "demo" / "eval.csv"
# A plain-CPU run in `processes` forked gloo workers (torch_xla hidden), as test_multiprocess trains.
IN_WORKERS = NO_XLA_PRELUDE + """
from accelerate import notebook_launcher
from {{ cookiecutter.project_slug }} import predict_cli

processes, port, *argv = sys.argv[1:]
notebook_launcher(predict_cli.run, (predict_cli.parse(argv),), num_processes=int(processes), use_port=port)
"""
{%- endif %}


def read_rows(path) -> list[dict]:
    if str(path).endswith(".csv"):
        with open(path, newline="", encoding="utf-8") as file:
            return list(csv.DictReader(file))
    return [json.loads(line) for line in open(path, encoding="utf-8")]


@pytest.mark.parametrize("case", ["no-weights", "no-column", "empty", "no-output-folder"])
def test_bad_input_is_one_line_exit_2_and_no_output(tmp_path, capsys, local_model, case):
    model, data, output = local_model, tmp_path / "in.csv", tmp_path / "predicted.csv"
    data.write_text("text\na fine film\n", encoding="utf-8")
    expected = {
        "no-weights": "no weights there (*.safetensors): the export is incomplete",
        "no-column": "no column 'text' (columns: sentence)",
        "empty": "no examples (empty file or header only)",
        "no-output-folder": "its folder does not exist",
    }[case]
    if case == "no-weights":
        model = tmp_path / "model"
        model.mkdir()
        (model / "config.json").write_text((local_model / "config.json").read_text())
    elif case == "no-column":
        data.write_text("sentence\na fine film\n", encoding="utf-8")
    elif case == "empty":
        data.write_text("text\n", encoding="utf-8")
    elif case == "no-output-folder":
        output = tmp_path / "missing" / "predicted.csv"
    with pytest.raises(SystemExit) as stopped:
        predict_cli.main(["--model", str(model), "--input", str(data), "--output", str(output)])
    assert stopped.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and expected in errors[0], errors
    assert not output.exists()
{%- if cookiecutter.task != "causal-lm" %}


@pytest.mark.xla
@pytest.mark.slow
def test_the_export_labels_the_eval_file_as_its_run_evaluated_it_in_one_graph(run_training, tmp_path):
    """The export of a float32 run labels the demo's eval file on the device (4 SPMD devices in an fsdp project):
    1 graph, none after the first batch, each of the 120 rows once in input order, each label the most probable
    class, and as many right as the run's own evaluation counted; the same labels as transformers' pipeline on the
    host's CPU."""
    from transformers import pipeline

    report, _ = run_training(*quick("--mixed_precision", "no", "--checkpoint", "false"))
    output = tmp_path / "predicted.csv"
    env = spmd_env(4) if PARALLELISM == "fsdp" else child_env()
    run(python_command("--model", report["exported"], "--input", str(EVAL_FILE), "--output", str(output),
                       "--batch_size", "16", "--max_seq_length", "64", module=PREDICT), env=env)
    figures = json.loads(output.with_name(output.name + ".report.json").read_text())
    assert (figures["graphs"], figures["graphs_after_first_batch"], figures["examples"]) == (1, 0, 120)
    rows, truth = read_rows(output), read_rows(EVAL_FILE)
    assert [int(row["row"]) for row in rows] == list(range(120))
    for row in rows:
        chances = [float(row[f"probability_{label}"]) for label in (0, 1)]
        assert abs(sum(chances) - 1) < 1e-5 and int(row["label"]) == chances.index(max(chances))
    right = sum(int(row["label"]) == int(expected["label"]) for row, expected in zip(rows, truth, strict=True))
    assert right == round(report["eval_accuracy"] * 120)
    on_cpu = pipeline("text-classification", model=report["exported"], device="cpu")
    ids = {name: index for index, name in on_cpu.model.config.id2label.items()}
    found = on_cpu([row["text"] for row in truth], truncation=True, max_length=64)
    assert [int(row["label"]) for row in rows] == [ids[label["label"]] for label in found]


@pytest.mark.slow
@pytest.mark.layout("data")
def test_two_processes_each_label_their_share_and_the_rows_come_back_once_in_order(tmp_path, local_model):
    """Two gloo workers on the CPU against one process: the same file, the same labels and probabilities."""
    outputs = {count: tmp_path / f"{count}.jsonl" for count in (1, 2)}
    flags = ["--model", str(local_model), "--input", str(EVAL_FILE), "--batch_size", "16", "--max_seq_length", "64",
             "--parallelism", "data"]
    run(python_command(*flags, "--output", str(outputs[1]), module=PREDICT, xla=False), env=child_env(xla=False))
    run(python_code(IN_WORKERS, "2", str(free_port()), *flags, "--output", str(outputs[2]), xla=False),
        env=child_env(xla=False))
    alone, shared = read_rows(outputs[1]), read_rows(outputs[2])
    assert [row["row"] for row in shared] == list(range(120))
    assert json.loads(outputs[2].with_name("2.jsonl.report.json").read_text())["processes"] == 2
    for one, other in zip(alone, shared, strict=True):
        assert one["label"] == other["label"]
        assert one["probability_1"] == pytest.approx(other["probability_1"], abs=1e-6)
{%- else %}


@pytest.mark.slow
@pytest.mark.layout("data")
def test_each_prompt_is_continued_once_in_input_order_on_the_host(tmp_path, demo_report):
    report, _ = demo_report("fp32")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"text": text}) + "\n" for text in ("The", "A TPU", "Data")), encoding="utf-8")
    output = tmp_path / "continued.jsonl"
    run(python_command("--model", report["exported"], "--input", str(prompts), "--output", str(output),
                       "--max_new_tokens", "8", module=PREDICT))
    rows = read_rows(output)
    assert [(row["row"], row["prompt"]) for row in rows] == [(0, "The"), (1, "A TPU"), (2, "Data")]
    assert all(row["continuation"].strip() for row in rows)
    figures = json.loads((tmp_path / "continued.jsonl.report.json").read_text())
    assert figures["generated_on"] == "the host's CPU" and figures["new_tokens_per_second"] > 0
{%- endif %}
