"""plan.py --rehearse: the run staged on XLA:CPU with nothing run, each of its graphs compiled for a TPU by libtpu.

Faithful: the graphs the rehearsal writes are the graphs a real run of the same flags compiles, read from the real
run's own XLA dump: as many, in the same order, each with the same parameters and outputs (shapes, in order) and the
same donated buffers; and their kinds are the phases the real run's graph watch saw. Over 4 devices, on a narrowed
model (the demo's, saved with save_pretrained, its vocabulary widened so that some tensors are placeholders): seconds
a graph. The real run, told it is on the v5e-4 slice just rehearsed (TPU_ACCELERATOR_TYPE), starts from the kept
rehearsal's peak instead of the estimate.

Each of the four main bakes rehearses one recipe (a real run and a rehearsal cost about a minute), so that together
they cover every pair of layout, task and step function: the lazy step in the default bake (in float32, whose
in-place updates once brought every earlier step back into each graph) and in the causal-LM fsdp one (bf16); the JAX
step in the fsdp and causal-LM bakes.
"""

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from conftest import PARALLELISM, TASK, child_env, python_command, run

PHASES = {"training step": "train", "evaluation": "eval"}
# (step function, precision flags) of this bake's recipe: see the module's docstring.
LAZY = (TASK == "causal-lm") == (PARALLELISM == "fsdp")
RECIPE = ("lazy", ["--mixed_precision", "no"] if TASK != "causal-lm" else []) if LAZY else ("auto", [])
DATA = Path(__file__).resolve().parents[1] / "data" / ("demo-lm" if TASK == "causal-lm" else "demo")


def signature(module_text: str) -> tuple:
    """(parameter shapes, output shapes, donated parameters) from an HLO module's first line."""
    head = module_text.split("\n", 1)[0]
    parameters, outputs = re.search(r"entry_computation_layout=\{\((.*)\)->\((.*)\)\}", head).groups()

    def shapes(listed: str) -> list:
        return [re.sub(r"\{[\d,]*\}", "", shape) for shape in re.sub(r"/\*index=\d+\*/", "", listed).split(", ")]

    donors = re.search(r"buffer_donor=\{(.*?)\}, entry", head)
    return shapes(parameters), shapes(outputs), sorted(map(int, re.findall(r"\((\d+), \{\}\)", donors.group(1)))) \
        if donors else []


@pytest.fixture(scope="module")
def wide_model(local_model, tmp_path_factory) -> Path:
    """The demo's model and tokenizer with a vocabulary of 4,096 rows: its embedding, that embedding's moments and
    gradient (1 MiB each, PLACEHOLDER_BYTES) are placeholders in the rehearsal, as every weight matrix of a real
    model is; the rest stays zeros."""
    import shutil

    import transformers

    from {{ cookiecutter.project_slug }}.xla.rehearsal import PLACEHOLDER_BYTES

    folder = tmp_path_factory.mktemp("wide-model")
    shutil.copytree(local_model, folder, dirs_exist_ok=True)
    config = transformers.AutoConfig.from_pretrained(local_model)
    config.vocab_size = 4096
    assert config.vocab_size * config.hidden_size * 4 >= PLACEHOLDER_BYTES
    auto = transformers.AutoModelForCausalLM if TASK == "causal-lm" else transformers.AutoModelForSequenceClassification
    auto.from_config(config).save_pretrained(folder)
    return folder


@pytest.mark.slow
def test_the_rehearsal_writes_the_graphs_a_real_run_compiles(tmp_path, wide_model):
    pytest.importorskip("libtpu", reason="the plan extra is not installed here (pip install -e '.[plan]' runs this test)")
    from jax._src.lib import xla_client

    step, precision = RECIPE
    flags = ["--model_name_or_path", str(wide_model), "--demo", "false", "--step_function", step, *precision,
             "--train_file", str(DATA / "train.csv"), "--eval_file", str(DATA / "eval.csv"), "--max_seq_length", "64",
             "--parallelism", PARALLELISM, "--train_batch_size", "4", "--eval_batch_size", "4"]
    # The plan first: it keeps each slice's answer in the default cache, which the real run then reads at its start.
    plan_report, cache = tmp_path / "plan.json", {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    run(python_command(*flags, "--tpu", "v5e-4", "--rehearse", "--report", str(plan_report), module="plan"),
        env=child_env(**cache))
    real_report, dump = tmp_path / "run.json", tmp_path / "dump"
    # TPU_ACCELERATOR_TYPE as a v5e-4 TPU VM sets it: the run looks for the rehearsal of its recipe on that slice.
    env = child_env(CPU_NUM_DEVICES="4", TPU_ACCELERATOR_TYPE="v5litepod-4", **cache)
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_dump_to={dump}".strip()
    # As the rehearsal stages it (plan_rehearsal.py): 2 epochs of 2 steps (16 examples a step over the 4 devices).
    started = run(python_command(*flags, "--output_dir", str(tmp_path / "run"), "--num_epochs", "2",
                                 "--max_train_examples", "32", "--report", str(real_report)), env=env)
    assert "GiB per chip (rehearsed: the TPU compiler's peak, training step, plan.py --rehearse for v5e-4 of " \
        in started.stdout + started.stderr

    # torch_xla's graphs (jax compiles small helpers of its own on the CPU while the JAX step is lowered: not the run's).
    compiled = [signature(path.read_text()) for path in sorted(dump.glob("*SyncTensorsGraph*.before_optimizations.txt"))]
    rehearsal = json.loads(plan_report.read_text())["targets"]["v5e-4"]["rehearsal"]
    staged = Path(rehearsal["graphs_folder"])
    written = [signature(xla_client._xla.HloModule.from_serialized_hlo_module_proto(
        (staged / graph["file"]).read_bytes()).to_string())[:2] + (graph["donor_indices"],) for graph in rehearsal["graphs"]]
    assert len(written) == len(compiled) >= 2
    for number, (mine, real) in enumerate(zip(written, compiled, strict=True), start=1):
        assert mine[0] == real[0], f"graph {number}: parameters differ"
        assert mine[1] == real[1], f"graph {number}: outputs differ"
        assert mine[2] == real[2], f"graph {number}: donated buffers differ"
    watched = json.loads(real_report.read_text())["graphs"]["graphs"]
    assert [PHASES.get(graph["kind"], "other") for graph in rehearsal["graphs"]] == [graph["phase"] for graph in watched]

    # What the TPU's compiler made of them, over 4 chips.
    assert rehearsal["fits"] is True and rehearsal["graphs_after_the_first_epoch"] == 0
    for graph in rehearsal["graphs"]:
        assert graph["peak_bytes"] > 0 and graph["compile_seconds"] > 0 and graph["flops"] > 0, graph
    step_graph = rehearsal["graphs"][0]
    assert step_graph["kind"] == "training step" and step_graph["batch_shapes"]["input_ids"] == [16, 64]  # 4 x 4 chips
    # The weights and moments it writes over are donated (aliased), and it holds collectives (the data layout's
    # gradient all-reduce, fsdp's gathers and reductions).
    assert step_graph["parts"]["aliased"] > 0 and step_graph["collectives"] > 0, step_graph
    assert Counter(graph["kind"] for graph in rehearsal["graphs"])["evaluation"] == 1
