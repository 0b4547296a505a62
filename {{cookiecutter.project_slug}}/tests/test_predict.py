"""predict.py: an exported model over a file{% if cookiecutter.task != "causal-lm" %} on the device, in one graph per batch shape, each row once and
in input order, as the run's own evaluation labelled it{% else %}, each prompt continued once and in input order{% endif %}; bad input is one line, exit status 2 and no output
file.
"""

import csv
import json
import shutil
import sys
from pathlib import Path

import pytest
{%- if cookiecutter.task != "causal-lm" %}
from comparing import BF16_RESOLUTION, float32_apart, margin, near_ties
{%- endif %}
from conftest import (
    NO_XLA_PRELUDE,
    PARALLELISM,
{%- if cookiecutter.task != "causal-lm" %}
    PROJECT,
{%- endif %}
    child_env,
    free_port,
    python_code,
    python_command,
{%- if cookiecutter.task != "causal-lm" %}
    quick,
{%- endif %}
    run,
    spmd_env,
)

from {{ cookiecutter.project_slug }} import predict_cli

PREDICT = "{{ cookiecutter.project_slug }}.predict_cli"
{%- if cookiecutter.task != "causal-lm" %}
EVAL_FILE = PROJECT / "data" / "demo" / "eval.csv"
{%- endif %}
# A plain-CPU run in `processes` forked gloo workers (torch_xla hidden), as test_multiprocess trains.
IN_WORKERS = NO_XLA_PRELUDE + """
from accelerate import notebook_launcher
from {{ cookiecutter.project_slug }} import predict_cli

processes, port, *argv = sys.argv[1:]
notebook_launcher(predict_cli.run, (predict_cli.parse(argv),), num_processes=int(processes), use_port=port)
"""


def launched(*flags) -> tuple[list[str], dict]:
    """(command, environment) of predict.py on the XLA device as a user starts it: through `accelerate launch` with
    the local config in the data layout, one plain process driving 4 SPMD devices under fsdp (as the pod script)."""
    if PARALLELISM == "fsdp":
        return python_command(*flags, module=PREDICT), spmd_env(4)
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", "configs/xla-cpu.yaml",
            "predict.py", *flags], child_env(PJRT_DEVICE="CPU")


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.layout("data")  # under fsdp a host runs predict.py as a plain process: the in-process test above
def test_bad_input_exits_2_in_one_line_through_the_launcher(tmp_path):
    """Accelerate's XLA launcher calls main() and drops what it returns: predict.py's refusal must still exit 2."""
    output = tmp_path / "predicted.csv"
    (tmp_path / "in.csv").write_text("text\na fine film\n", encoding="utf-8")
    result = run(*launched("--model", str(tmp_path / "nothing"), "--input", str(tmp_path / "in.csv"),
                           "--output", str(output)), check=False)
    assert result.returncode == 2, result.stderr[-3000:]
    assert [line for line in result.stderr.splitlines() if "error: " in line] == [
        f"error: model={str(tmp_path / 'nothing')!r}: no config.json there: give the folder train.py exported "
        "(OUTPUT_DIR/model)"]
    assert not output.exists()


def alone_from_a_hub_split_and_in_two_workers(tmp_path, flags: list[str]) -> tuple[list[dict], list[dict]]:
    """(the rows of one plain CPU process, those of two forked gloo workers) for `flags`, in the data layout; the
    input read as a hub data set's split gives the one process's rows again, and the workers' report says 2."""
    flags = [*flags, "--parallelism", "data"]
    outputs = {count: tmp_path / f"{count}.jsonl" for count in (1, 2)}
    run(python_command(*flags, "--output", str(outputs[1]), module=PREDICT, xla=False), env=child_env(xla=False))
    assert read_rows(from_a_hub_split(tmp_path, flags)) == read_rows(outputs[1])
    run(python_code(IN_WORKERS, "2", str(free_port()), *flags, "--output", str(outputs[2]), xla=False),
        env=child_env(xla=False))
    assert json.loads(outputs[2].with_name("2.jsonl.report.json").read_text())["processes"] == 2
    return read_rows(outputs[1]), read_rows(outputs[2])


def from_a_hub_split(tmp_path, flags: list[str]):
    """predict.py's output for the input of `flags` read as a hub data set's validation split (a local folder laid
    out like one: what datasets.load_dataset reads for a hub name), in one plain CPU process."""
    given = Path(flags[flags.index("--input") + 1])
    hub = tmp_path / "hub-like"
    hub.mkdir()
    shutil.copy(given, hub / f"validation{given.suffix}")
    output = tmp_path / "from-the-hub.jsonl"
    flags = [*flags[:flags.index("--input") + 1], str(hub), "--split", "validation", *flags[flags.index("--input") + 2:]]
    run(python_command(*flags, "--output", str(output), module=PREDICT, xla=False), env=child_env(xla=False))
    return output


def read_rows(path) -> list[dict]:
    if str(path).endswith(".csv"):
        with open(path, newline="", encoding="utf-8") as file:
            return list(csv.DictReader(file))
    return [json.loads(line) for line in open(path, encoding="utf-8")]


BAD_INPUT = {
    "no-weights": "no weights there (*.safetensors): the export is incomplete",
    "a-checkpoint": "a checkpoint, not an export: give OUTPUT_DIR/model",
    "mixed_precision": "mixed_precision='fp16': must be one of bf16, no",
    "no-column": "no column 'text' (columns: sentence)",
    "empty": "no examples (empty file or header only)",
    "no-output-folder": "its folder does not exist",
    "no-input": "no such file or folder",
    "no-split": "in.csv has no such split (splits: validation)",
{%- if cookiecutter.task != "causal-lm" %}
    "max_seq_length": "max_seq_length=100000: must be from 1 to",
    "label-outside-the-head": "in.csv line 2: label '5' is not a whole number in 0..1 (num_labels=2)",
{%- else %}
    "too-many-tokens": "max_new_tokens=100000: must be below",
    "generate_on": "generate_on='gpu': must be one of device, host",
    "max_new_tokens": "max_new_tokens=0: must be at least 1",
    "temperature": "temperature=-1.0: must be 0 (greedy) or above",
    "host-sampling": "temperature=0.7: the host generates greedily only",
{%- endif %}
}
FLAGS = {"label-outside-the-head": ["--label_column", "label"], "mixed_precision": ["--mixed_precision", "fp16"], "max_seq_length": ["--max_seq_length", "100000"], "too-many-tokens": ["--max_new_tokens", "100000"],
         "generate_on": ["--generate_on", "gpu"], "max_new_tokens": ["--max_new_tokens", "0"],
         "temperature": ["--temperature", "-1"], "host-sampling": ["--generate_on", "host", "--temperature", "0.7"]}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_is_one_line_exit_2_and_no_output(tmp_path, capsys, local_model, case):
    model, data, output = local_model, tmp_path / "in.csv", tmp_path / "predicted.csv"
    data.write_text("text\na fine film\n", encoding="utf-8")
    expected = BAD_INPUT[case]
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
    elif case == "a-checkpoint":  # what a checkpoint folder holds beside its weights (fault_tolerance/)
        model = tmp_path / "epoch-1"
        model.mkdir()
        for name in ("manifest.json", "settings.json", "pytorch_model.bin"):
            (model / name).write_text("{}", encoding="utf-8")
    elif case == "label-outside-the-head":
        data.write_text("text,label\na fine film,5\n", encoding="utf-8")
    elif case == "no-input":
        data = tmp_path / "missing.csv"
    elif case == "no-split":  # a folder laid out like a hub data set, without the split asked for (test)
        data.unlink()
        data.mkdir()
        (data / "validation.csv").write_text("text\na fine film\n", encoding="utf-8")
    with pytest.raises(SystemExit) as stopped:
        predict_cli.main(["--model", str(model), "--input", str(data), "--output", str(output), *FLAGS.get(case, [])])
    assert stopped.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and expected in errors[0], errors
    assert not output.exists()
{%- if cookiecutter.task != "causal-lm" %}


def row_probabilities(row: dict) -> list[float]:
    """A labelled row's probability of each class, in class order."""
    return [float(row[f"probability_{label}"]) for label in range(2)]


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.compares("float32", "labels and counts of the export: predict.py on the device against the run's "
                      "evaluation and transformers' pipeline on the host; at bf16 against float32 (bf16's resolution)")
def test_the_export_labels_the_eval_file_as_its_run_evaluated_it_in_one_graph(run_training, tmp_path):
    """The export of a float32 run labels the demo's eval file on the device in float32 (through `accelerate
    launch`; 4 SPMD devices in an fsdp project):
    1 graph, none after the first batch, each of the 120 rows once in input order, each label the most probable
    class, and as many right as the run's own evaluation counted; the same labels as transformers' pipeline on the
    host's CPU; and at bf16 the same labels but where bf16's rounding moved the probabilities across a tie.

    Each is another program than the one it is compared with (tests/comparing.py): in float32 a label may differ only
    at a near tie, a row whose two probabilities are within float32's bound of each other (the smallest margin here: 0.058); in bf16
    every probability moves by about bf16's resolution, and a label may differ only where the float32 margin is
    within what bf16 moved that row."""
    from transformers import pipeline

    report, _ = run_training(*quick("--mixed_precision", "no", "--checkpoint", "false"))
    output, in_bf16 = tmp_path / "predicted.csv", tmp_path / "predicted-bf16.csv"
    flags = ("--model", report["exported"], "--input", str(EVAL_FILE), "--batch_size", "16", "--max_seq_length", "64")
    run(*launched(*flags, "--output", str(output), "--mixed_precision", "no", "--label_column", "label"))
    figures = json.loads(output.with_name(output.name + ".report.json").read_text())
    assert (figures["graphs"], figures["graphs_after_first_batch"], figures["examples"]) == (1, 0, 120)
    assert figures["precision"] == "fp32"
    rows, truth = read_rows(output), read_rows(EVAL_FILE)
    assert [int(row["row"]) for row in rows] == list(range(120))
    for row in rows:
        chances = [float(row[f"probability_{label}"]) for label in (0, 1)]
        assert abs(sum(chances) - 1) < 1e-5 and int(row["label"]) == chances.index(max(chances))
    ties = near_ties([margin(row_probabilities(row)) for row in rows], float32_apart(1))
    right = sum(int(row["label"]) == int(expected["label"]) for row, expected in zip(rows, truth, strict=True))
    assert right == round(figures["accuracy"] * 120) and abs(right - round(report["eval_accuracy"] * 120)) <= len(ties)
    assert [row["true_label"] for row in rows] == [expected["label"] for expected in truth]
    on_cpu = pipeline("text-classification", model=report["exported"], device="cpu")
    ids = {name: index for index, name in on_cpu.model.config.id2label.items()}
    found = [ids[label["label"]] for label in on_cpu([row["text"] for row in truth], truncation=True, max_length=64)]
    assert {index for index, row in enumerate(rows) if int(row["label"]) != found[index]} <= set(ties)
    # At bf16 (autocast around the forward, predict.py's default as training's): each probability within bf16's
    # resolution of its float32 one (measured: 1.2e-4 at most, natively and as an AVX2 CPU compiles it), and the same
    # label wherever the float32 margin is wider than twice that row's move (the smallest margin measured: 0.058).
    run(python_command(*flags, "--output", str(in_bf16), "--mixed_precision", "bf16", module=PREDICT),
        launched()[1])  # the launcher is shown above: the same environment, forked (seconds instead of ~10)
    assert json.loads(in_bf16.with_name(in_bf16.name + ".report.json").read_text())["precision"] == "bf16"
    in_bf16_rows = read_rows(in_bf16)
    moved = [max(abs(a - b) for a, b in zip(row_probabilities(low), row_probabilities(row), strict=True))
             for low, row in zip(in_bf16_rows, rows, strict=True)]
    assert max(moved) <= BF16_RESOLUTION, max(moved)
    flipped = [index for index, row in enumerate(in_bf16_rows) if int(row["label"]) != int(rows[index]["label"])]
    assert all(margin(row_probabilities(rows[index])) <= 2 * moved[index] for index in flipped), flipped


@pytest.mark.slow
@pytest.mark.layout("data")
@pytest.mark.compares("float32", "labels and probabilities of an untrained model: two gloo processes against one")
def test_two_processes_each_label_their_share_and_the_rows_come_back_once_in_order(tmp_path, local_model):
    """Two gloo workers on the CPU against one process: the same file, the same labels and probabilities; the same
    file as a hub data set's split, the same rows."""
    alone, shared = alone_from_a_hub_split_and_in_two_workers(tmp_path, [
        "--model", str(local_model), "--input", str(EVAL_FILE), "--batch_size", "16", "--max_seq_length", "64"])
    assert [row["row"] for row in shared] == list(range(120))
    # Eager float32 on the host in batches of other rows: another summation order, one forward (tests/comparing.py).
    ties = near_ties([margin(row_probabilities(row)) for row in alone], float32_apart(1))
    for index, (one, other) in enumerate(zip(alone, shared, strict=True)):
        assert one["label"] == other["label"] or index in ties
        assert one["probability_1"] == pytest.approx(other["probability_1"], abs=float32_apart(1))
{%- else %}


PROMPTS = ("The support team is", "A TPU", "The router is superb", "Data", "A long weekend on rainy days with the")


def write_prompts(folder):
    prompts = folder / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"text": text}) + "\n" for text in PROMPTS), encoding="utf-8")
    return prompts


@pytest.mark.xla
@pytest.mark.slow
@pytest.mark.compares("float32", "greedy continuations of the float32 export: the device's prefill and decode graphs "
                      "against transformers' generate() on the host")
def test_the_device_continues_each_prompt_as_the_host_does_in_two_graphs(tmp_path, demo_report):
    """The demo's float32 export continues 5 prompts in batches of 2 (the last padded) on the device (through
    `accelerate launch`; 4 SPMD devices in an fsdp project): a prefill graph and one decode graph for all 12 steps of
    all 3 batches, and for each prompt the same greedy continuation as transformers' generate() on the host's CPU
    (--generate_on host).

    Two float32 programs (tests/comparing.py): each token is the argmax of logits that agree within float32's bound,
    so the two pick another token only where the top two logits are that close. The demo's are not (the smallest gap
    of the 60 tokens, measured on the host: 5.2e-4 of the top logit, about 70 times the bound): compared token for
    token."""
    report, _ = demo_report("fp32")
    prompts, outputs = write_prompts(tmp_path), {where: tmp_path / f"{where}.jsonl" for where in ("device", "host")}
    for where, output in outputs.items():
        flags = ("--model", report["exported"], "--input", str(prompts), "--output", str(output),
                 "--max_new_tokens", "12", "--batch_size", "2", "--generate_on", where, "--mixed_precision", "no")
        run(*(launched(*flags) if where == "device" else (python_command(*flags, module=PREDICT), child_env())))
    figures = json.loads(outputs["device"].with_name("device.jsonl.report.json").read_text())
    assert (figures["graphs"], figures["graphs_after_first_batch"], figures["generated_on"]) == (2, 0, "the device")
    on_device, on_host = read_rows(outputs["device"]), read_rows(outputs["host"])
    assert [(row["row"], row["prompt"]) for row in on_device] == list(enumerate(PROMPTS))
    assert [row["continuation"] for row in on_device] == [row["continuation"] for row in on_host]
    assert any(row["continuation"].strip() for row in on_device)
    host_figures = json.loads(outputs["host"].with_name("host.jsonl.report.json").read_text())
    assert host_figures["generated_on"] == "the host's CPU"
    assert figures["new_tokens"] == host_figures["new_tokens"] > 0


@pytest.mark.slow
@pytest.mark.layout("data")
@pytest.mark.compares("float32", "greedy continuations of an untrained model: two gloo processes against one")
def test_two_processes_each_continue_their_share_and_the_rows_come_back_once_in_order(tmp_path, local_model):
    """Two gloo workers on the CPU against one process: the same greedy continuations, each prompt once, in order;
    the same file as a hub data set's split, the same rows. (Eager float32 in batches of other rows: token for token,
    as in test_the_device_continues_each_prompt_as_the_host_does_in_two_graphs.)"""
    alone, shared = alone_from_a_hub_split_and_in_two_workers(tmp_path, [
        "--model", str(local_model), "--input", str(write_prompts(tmp_path)), "--batch_size", "2",
        "--max_new_tokens", "6"])
    assert [row["row"] for row in shared] == list(range(len(PROMPTS)))
    assert [row["continuation"] for row in alone] == [row["continuation"] for row in shared]


def test_sampling_draws_each_token_as_often_as_its_probability():
    """The Gumbel-max draw against softmax(logits / temperature): 40 000 draws of 4 tokens within 1 % each; a
    temperature near 0 is the greedy choice."""
    import torch

    from {{ cookiecutter.project_slug }}.loop import generation

    torch.manual_seed(0)
    logits = torch.tensor([2.0, 1.0, 0.5, -1.0]).repeat(40_000, 1)
    for temperature in (1.0, 2.0):
        drawn = torch.bincount(generation._choose(logits, temperature), minlength=4) / len(logits)
        assert torch.allclose(drawn, torch.softmax(logits[0] / temperature, dim=0), atol=0.01), (temperature, drawn)
    assert generation._choose(logits[:100], 1e-6).eq(0).all()
{%- endif %}
