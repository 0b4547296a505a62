"""Write the template's notebook, `{{cookiecutter.project_slug}}/train_on_tpu.ipynb`, with nbformat.

The notebook is never edited by hand: change the cells here and run
`python tools/build_notebook.py` (tests/test_notebook_source.py fails when the two differ).

Each cell's source is written as one JSON string (not split into lines), so the few
Jinja tags inside a cell change only the text of that string and the rendered file
stays valid JSON. Only safe values go through Jinja: the package name (a validated
identifier), the torch pin and the choices (`shared_model`, `variants`,
`include_benchmarks`, `task`, `mixed_precision`, `pure_bf16`). Jinja tags must not contain double quotes (JSON would escape them).
"""

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

TEMPLATE = Path(__file__).resolve().parent.parent
NOTEBOOK = TEMPLATE / "{{cookiecutter.project_slug}}" / "train_on_tpu.ipynb"
PKG = "{{ cookiecutter.project_slug }}"
TORCH = "{{ cookiecutter._torch_version }}"
# Single quotes only inside Jinja tags: JSON leaves them alone.
SCRIPT_TOO = "{% if cookiecutter.variants != 'notebook' %}; `train.py` runs the same function from a shell{% endif %}"
IF_SHARED, ELSE, END = "{% if cookiecutter.shared_model %}", "{% else %}", "{% endif %}"


def shared_or_not(shared: str, not_shared: str) -> str:
    return f"{IF_SHARED}{shared}{ELSE}{not_shared}{END}"


INTRO = f"""# Train `{PKG}` on a TPU from a notebook

This notebook runs `training_function` from `{PKG}/loop/training.py` (imported, not copied{SCRIPT_TOO}),
launched with Accelerate's `notebook_launcher`. Run it top to bottom on a Colab or Kaggle
**TPU runtime**, or locally as a quick check.

Three rules keep a notebook launch working:

1. **No cell before the launch may use a device**: no tensor on an XLA device, no `Accelerator()`.
   A guard checks this just before launching.
2. {shared_or_not(
    "**The model is built once, on the CPU, in its own cell**, and handed to every training process.",
    "**The model is built inside the training function**, once per process "
    "(this project was generated with `shared_model=no`; section 4 says when to change that).",
)}
3. **After a crash, restart the runtime** before running the cells again.
"""

INSTALL_WHY = """## 1. Install (Colab and Kaggle only)

`torch_xla` is built against exactly one `torch` release, so the two are installed together,
pinned to the versions this project was generated for, and every other library at the version it
was tested with (`constraints.txt`). First put this project on the runtime
(`!git clone` your repository, or upload the folder) and `%cd` into it, so that `pip install -e .`
finds it. If the install replaced a `torch` that was already imported, restart the runtime once and
continue from the next cell.

Outside Colab and Kaggle this cell installs nothing: install locally with
`pip install -e '.[xla-cpu,dev]' -c constraints.txt` from the project folder.
"""

INSTALL = f"""import os
import sys

# The same test notebook_launcher makes to decide whether it runs on Colab or Kaggle.
HOSTED = "google.colab" in sys.modules or any(key.startswith("KAGGLE") for key in os.environ)
if HOSTED:
    %pip install --quiet "torch=={TORCH}" "torch_xla[tpu]=={TORCH}" -e . -c constraints.txt
else:
    print("Not on Colab or Kaggle: nothing to install here (locally: pip install -e '.[xla-cpu,dev]' -c constraints.txt).")"""

IMPORTS_WHY = """## 2. Imports that touch no device

Importing torch, torch_xla, Accelerate and this project is safe: none of it puts a tensor on a
device or creates an `Accelerator`. Keep it that way. Code that does must go inside
`training_function`, which runs in the launched processes.
"""

IMPORTS = f"""import json
import os

from accelerate import notebook_launcher

from {PKG}.config import TrainConfig
from {PKG}.data.sources import wants_demo
from {PKG}.launch.launch_guard import check_before_launch
from {PKG}.loop.report import format_table
from {PKG}.precision.levels import accelerate_mixed_precision, requested_level
{shared_or_not(f"from {PKG}.tasks import task{chr(10)}from {PKG}.data.tokenizer import load_tokenizer{chr(10)}", "")}from {PKG}.loop.training import training_function"""

CONFIG_WHY = """## 3. Configuration

`TrainConfig()` starts from the answers this project was generated with (model, batch sizes,
sequence length, epochs, precision); change a field here, for example `TrainConfig(num_epochs=1)`.
The tests shrink the run through `NOTEBOOK_OVERRIDES`, a JSON object in the environment; you can
ignore it.

**Precision**, by what is stored and what is lost (this project's defaults:
`mixed_precision="{{ cookiecutter.mixed_precision }}"`, `pure_bf16="{{ cookiecutter.pure_bf16 }}"`):

- `mixed_precision="bf16"`, `pure_bf16="no"` (the template's default): weights, gradients and AdamW's
  moments float32, the forward under `torch.autocast`, so matmuls run in bf16. Every update is kept;
  the state takes as many bytes as float32.
- `mixed_precision="no"`: float32 throughout. Nothing lost, full bytes, slowest matmuls.
- `pure_bf16="xla"` (`XLA_USE_BF16`), `"downcast"` (`XLA_DOWNCAST_BF16`) or `"cast"`
  (`model.to(torch.bfloat16)`): weights, gradients and optimizer state in bf16, half the bytes. An
  AdamW update smaller than half a bf16 spacing of its weight rounds away: at learning rate 2e-5,
  every weight of magnitude 0.0078 or more (computed from bf16's 8 significant bits), most of a
  pretrained model. Such a run prints the fraction of weights at risk; `kahan_summation=True` keeps
  those updates for one more weight-sized bf16 buffer.

**How many processes to expect.** With `num_processes` 1 (the default) the function runs in this
notebook's own process, which drives every chip of the runtime over an SPMD mesh (Colab's TPU runtime
is now a v5e-1, one chip; Kaggle's a v5e-8, eight), and the step is one JAX function. With more,
`notebook_launcher` forks workers: on a Colab or Kaggle TPU runtime torch_xla starts **one process per
TPU chip** whatever the number says (the "8 processes" in older guides is the v2-8/v3-8 board), and
they take the lazy step; elsewhere `num_processes` is how many workers it forks on the CPU or GPUs.
"""

CONFIG = """# A quick run: NOTEBOOK_OVERRIDES='{"demo": true, "num_epochs": 1, "max_seq_length": 64}'
overrides = json.loads(os.environ.get("NOTEBOOK_OVERRIDES", "{}"))
launch_options = {
    "num_processes": overrides.pop("num_processes", 1),
    "use_port": str(overrides.pop("use_port", 29500)),
}
config = TrainConfig(**overrides)
# Decided once here, not probed again in every process: the offline demo, or the hub model and data.
config.demo = wants_demo(config.data, config.model)
# The launcher tells forked workers a precision, which the function reads where the config leaves it open:
# give it the one this config asks for (a bad combination stops here, before anything is launched).
launch_options["mixed_precision"] = accelerate_mixed_precision(requested_level(config.precision))
print(config)
print(launch_options)"""

FORK_WHY = """## Why a notebook forks, and what that means

From a command line, `accelerate launch` or torch_xla **spawns** the training processes: each is a
fresh Python that imports the training script and runs it from the top. A notebook cannot be re-run that way,
because its functions and variables exist only inside this running process. So `notebook_launcher`
**forks**: every training process starts as a copy of this process, with everything defined so far.

Two consequences:

- The copies must not inherit a device this process has already opened: the runtime cannot be
  shared across a fork, and the failure appears later as an unrelated-looking error. Hence rule 1,
  and the guard before the launch.
- Whatever is built before the launch exists once and is handed to every copy, instead of being
  built once per process. That is what the next cell uses.
"""

MODEL_WHY = shared_or_not(
    """## 4. Build the model once

A model built inside the training function is built by every process: eight processes, eight
copies in host memory. A small host (Colab, Kaggle) runs out of RAM, the kernel kills a process,
and what you see is `ProcessExitedException: process 0 terminated with signal SIGSEGV`
(or `SIGKILL`): **host memory ran out**, not a bug in your code.

Built here, once, on the CPU, the model is passed to every process. On the CPU or GPUs the forked
processes share its memory pages until they write to them: about one copy in all. On a TPU runtime
torch_xla's launcher pickles it into shared memory (`/dev/shm`), one copy that every process maps,
so `/dev/shm` must hold the whole model (a Docker container's default 64 MB does not). Its processes
are forked before the model is pickled, so they also keep the original pages between them: about
two copies in all. Either way, not one per process.

Do not move it to a device here: `training_function` does that inside each process.
""",
    """## 4. The model

This project was generated with `shared_model=no`: each process builds its own model inside
`training_function`. That is simplest, and fine from a script or on a host with plenty of RAM.

With several processes on a small host (Colab, Kaggle), those copies can exhaust host memory, and
`ProcessExitedException: process 0 terminated with signal SIGSEGV` (or `SIGKILL`) then means
**host memory ran out**. The fix is to build the model once in this cell, on the CPU, with
`task.build_model` from `""" + PKG + """.tasks`, and pass it in place of `None`: generate the project with
`shared_model=yes` to get that version.
""",
) + (
    "{% if cookiecutter.include_benchmarks %}\n`benchmarks/test_shared_model_memory.py` measures the host memory of both "
    "patterns (and of the two ways a shared model travels) for 2 and 4 forked workers.\n{% endif %}"
)

MODEL = shared_or_not(
    """tokenizer = load_tokenizer(config.data, config.model, config.demo)
model = task.build_model(config, config.demo, vocab_size=len(tokenizer))
count = sum(parameter.numel() for parameter in model.parameters())
print(f"{type(model).__name__}: {count / 1e6:.1f}M parameters, on {next(model.parameters()).device}")""",
    """model = None  # training_function builds the model inside each process""",
)

LAUNCH_WHY = """## 5. Launch

`check_before_launch` stops here, naming the cell to move, if anything above touched a device.
With `num_processes` 1, or `parallelism="fsdp"` (SPMD FSDPv2), there is nothing to fork: this
process drives every chip, and `training_function` runs right here. Otherwise `notebook_launcher`
starts the training: one process per chip on a TPU runtime, elsewhere `num_processes` forked workers.
"""

LAUNCH = """check_before_launch(model, launch_options["num_processes"])
if config.parallelism == "fsdp" or launch_options["num_processes"] == 1:
    # SPMD: one process drives every chip of this host, so the function runs here, not in forked workers.
    training_function(model, config)
else:
    notebook_launcher(training_function, (model, config), **launch_options)"""

REPORT_WHY = """## 6. The report

The main process wrote the training report ({{ 'perplexity' if cookiecutter.task == 'causal-lm' else 'accuracy' }}, throughput, XLA compilations, the
precision level used and what it stored in which type) as JSON next to the checkpoints.
"""

REPORT = """report = json.loads(config.report_path.read_text())
print(config.report_path)
print(format_table(report))"""

PREDICT_WHY = """## 7. Use your model

The run exported the model (`report["exported"]`, `outputs/model`). `predict.py`'s function {% if cookiecutter.task == 'causal-lm' %}continues each prompt
of a file with it, on the device (a static KV cache, two graphs){% else %}labels a file with it on the device, in one
graph{% endif %}, launched as training was: here the eval file (yours, or the demo's), into
`outputs/predictions.jsonl`, with its report beside it. `PredictConfig` takes predict.py's options
(`python predict.py --help`); for a hub data set give `input=config.dataset, split="validation"` and its text column."""

PREDICT = """from {{ cookiecutter.project_slug }} import predict_cli
from {{ cookiecutter.project_slug }}.data.sources import DEMO_FILES

predict = predict_cli.PredictConfig(
    model=report["exported"], input=str(config.eval_file or DEMO_FILES["eval"]),
    output=os.path.join(config.output_dir, "predictions.jsonl"), parallelism=config.parallelism,{% if cookiecutter.task == 'causal-lm' %}
    max_new_tokens=16,{% endif %}
)
if config.parallelism == "fsdp" or launch_options["num_processes"] == 1:
    predict_cli.run(predict)  # this process drives every chip, as in training
else:
    notebook_launcher(predict_cli.run, (predict,), **launch_options)
with open(predict.output, encoding="utf-8") as file:
    print(*file.readlines()[:3], sep="")"""

AFTER_CRASH = f"""## If it crashed

- **`SIGSEGV` or `SIGKILL` while the processes start**: host memory ran out.
  {shared_or_not(
      "The model already exists once; what remains per process is the runtime and the data: "
      "choose a smaller model, or a runtime with more host memory.",
      "Build the model once and pass it in (section 4).",
  )}
- **Any crash in a launched process** leaves this notebook's process in an unknown state (a
  half-started runtime, ports still held). **Restart the runtime** (Colab: Runtime > Restart
  session; Kaggle: Run > Restart & clear cell outputs; Jupyter: Kernel > Restart) and run all cells
  from the top. Running the launch cell again without a restart usually fails for another,
  misleading reason.
- **`UnsafeLaunch: Cannot launch.`** comes from the guard: move the cell it names into
  `training_function` (or delete it), restart the runtime, and run again.
- Checkpoints survive a restart: set `config.resume = True` in section 3 to continue after the
  last complete epoch.
"""


def build() -> str:
    """The notebook file's text, exactly as committed."""
    cells = [
        new_markdown_cell(INTRO, id="intro"),
        new_markdown_cell(INSTALL_WHY, id="install-why"),
        new_code_cell(INSTALL, id="install"),
        new_markdown_cell(IMPORTS_WHY, id="imports-why"),
        new_code_cell(IMPORTS, id="imports"),
        new_markdown_cell(CONFIG_WHY, id="config-why"),
        new_code_cell(CONFIG, id="config"),
        new_markdown_cell(FORK_WHY, id="fork-why"),
        new_markdown_cell(MODEL_WHY, id="model-why"),
        new_code_cell(MODEL, id="model"),
        new_markdown_cell(LAUNCH_WHY, id="launch-why"),
        new_code_cell(LAUNCH, id="launch"),
        new_markdown_cell(REPORT_WHY, id="report-why"),
        new_code_cell(REPORT, id="report"),
        new_markdown_cell(PREDICT_WHY, id="predict-why"),
        new_code_cell(PREDICT, id="predict"),
        new_markdown_cell(AFTER_CRASH, id="after-crash"),
    ]
    notebook = new_notebook(cells=cells, metadata={
        # Colab opens the notebook on a TPU runtime.
        "accelerator": "TPU",
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    })
    nbformat.validate(notebook)
    return nbformat.writes(notebook, split_lines=False) + "\n"


def main() -> int:
    NOTEBOOK.write_text(build(), encoding="utf-8")
    print(f"wrote {NOTEBOOK.relative_to(TEMPLATE)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
