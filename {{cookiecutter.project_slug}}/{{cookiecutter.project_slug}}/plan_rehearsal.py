"""plan.py --rehearse: the run staged on XLA:CPU, each graph it would hand a TPU compiled for every target by libtpu.

Each graph is captured by xla/rehearsal.py and compiled by xla/tpu_graphs.py, without a TPU.

The rehearsal is a child process (rehearse_cli.py: `python -m <package>.rehearse_cli FOLDER CHIPS [plan.py's flags]`): it runs
training_function with the run's flags on CPU_NUM_DEVICES=CHIPS XLA:CPU devices (one process over the slice's chips
under SPMD, as `python train.py` drives a TPU VM's chips), with three changes, each said in the report:

- the model is the run's architecture at full size, built from its config with uninitialised weights: no weight is
  read; the weights and moments become placeholders before the first step (xla/rehearsal.py);
- the training data is the shipped demo's text repeated, tokenised by the run's tokenizer (the model's, else the
  demo's as the run trains it: rehearse_cli.run_tokenizer), at the run's shapes (batch sizes, --max_seq_length,
  --padding): what a graph depends on is the shapes, not the words; the evaluation
  reads the run's own --eval_file where it is a local file (its size and lengths make the eval batches' shapes), else
  one batch of the demo's;
- it runs 2 epochs of 2 optimizer steps each and evaluates after each (first steps, the steady step, an evaluation,
  an epoch's end), with no checkpoint and no export: a save only moves data to the host (a real run's graph watch
  counts no graph for it, tests/test_rehearsal.py checks that).

It cannot stage several XLA processes (torch_xla cannot run them on the CPU): the data layout as one process per
chip (Accelerate's launchers) is rehearsed as one process over the chips, whose step holds the same all-reduce.
"""

import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .config import UserError

STEPS_PER_EPOCH, EPOCHS = 2, 2


def stage(plan_argv: list, folder: Path, chips: int) -> list[dict]:
    """The run's graphs (xla/rehearsal.Stage's index) staged in a child process on `chips` XLA:CPU devices."""
    package = __package__
    env = {**os.environ, "PJRT_DEVICE": "CPU", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if "xla_dump_to" in env.get("XLA_FLAGS", ""):  # a dump asked of the plan is not the staging's to write
        env.pop("XLA_FLAGS")
    if chips > 1:
        env["CPU_NUM_DEVICES"] = str(chips)
    else:
        env.pop("CPU_NUM_DEVICES", None)
    done = subprocess.run([sys.executable, "-m", f"{package}.rehearse_cli", str(folder), str(chips), *plan_argv],
                          env=env, capture_output=True, text=True)
    index = folder / "graphs.json"
    if done.returncode != 0 or not index.is_file():
        said = [line for line in (done.stderr or done.stdout).strip().splitlines() if line.strip()]
        raise RehearsalRefused(f"rehearse: the staging process ended with status {done.returncode}: "
                           f"{said[-1] if said else 'no output (a host read of a placeholder ends it so)'}")
    return json.loads(index.read_text())


class RehearsalRefused(UserError, RuntimeError):
    """--rehearse: the run would not start on a TPU (a graph that does not compile for one, or past its HBM)."""

    exit_code = 3


def rehearsal_problem() -> str | None:
    """Why --rehearse cannot compile here (the plan extra missing), or None."""
    from .xla.tpu_compile import tpu_compiler_problem

    missing = tpu_compiler_problem()
    return f"rehearse: {missing}: pip install -e '.[plan]' -c constraints.txt" if missing else None


def add_rehearsals(report: dict, chosen: list, cache: Path, plan_argv: list, say=print) -> None:
    """Each target's `rehearsal` in the plan's report; a graph that does not compile for a TPU ends the plan (exit 3)."""
    for name, rehearsal in rehearse(plan_argv, chosen, cache, say).items():
        report["targets"][name]["rehearsal"] = rehearsal


def rehearse(plan_argv: list, chosen: list, cache: Path, say=print) -> dict:
    """{target name: its rehearsal}: the run staged once per slice size, each graph compiled for each target."""
    from .xla.tpu_graphs import compile_module

    staged, results = {}, {}
    for target in chosen:
        if target.chips not in staged:
            folder = Path(tempfile.mkdtemp(prefix="rehearsal-graphs-"))
            say(f"rehearsing the run on {target.chips} XLA:CPU device(s): its graphs captured, nothing run...")
            staged[target.chips] = (folder, stage(plan_argv, folder, target.chips))
        folder, graphs = staged[target.chips]
        topology, bounds = target.topology()
        say(f"compiling its {len(graphs)} graph(s) for {target.name} ({topology}) with the TPU's compiler...")
        compiled = []
        for graph in graphs:
            try:
                figures = compile_module((folder / graph["file"]).read_bytes(), graph["donors"], topology=topology,
                                         chips_per_host_bounds=bounds, cache=cache)
            except Exception as error:
                said = str(error).strip().splitlines()[0][:300] if str(error).strip() else type(error).__name__
                raise RehearsalRefused(f"rehearse for {target.name}: graph {graph['number']} ({graph['kind']}) "
                                      f"does not compile for a TPU: {said}") from error
            compiled.append({**{key: graph[key] for key in ("number", "kind", "batch_shapes", "reached", "file",
                                                            "hlo_sha256", "epoch",
                                                            "tpu_lowering_may_differ")},
                             "donor_indices": graph["donors"], **figures})
        # What the staged run chose (its step function, layout, precision level, and whose tokenizer made its lengths).
        staged_run = json.loads((folder / "run.json").read_text()) if (folder / "run.json").is_file() else None
        results[target.name] = {**summary(compiled, target.chip.usable_hbm_bytes), "graphs_folder": str(folder),
                                "staged_run": staged_run}
    return results


def summary(graphs: list, usable: int) -> dict:
    """A target's rehearsal: its graphs, whether the largest fits, and the TPU compile seconds before the first
    training step (every graph up to the first step's) and over the whole run (each graph once)."""
    first = next((index for index, graph in enumerate(graphs) if graph["kind"] == "training step"), len(graphs) - 1)
    largest = max(graphs, key=lambda graph: graph["peak_bytes"]) if graphs else None
    return {
        "graphs": graphs,
        # A real run's graph watch calls a graph first compiled after the first epoch a recompilation.
        "graphs_after_the_first_epoch": sum(1 for graph in graphs if (graph["epoch"] or 1) > 1),
        "largest_peak_bytes": largest["peak_bytes"] if largest else 0,
        "largest": largest["kind"] if largest else None,
        "fits": all(graph["fits"] is not False and graph["peak_bytes"] <= usable for graph in graphs),
        "compile_seconds_before_first_step": round(sum(graph["compile_seconds"] for graph in graphs[:first + 1]), 1),
        "compile_seconds_whole_run": round(sum(graph["compile_seconds"] for graph in graphs), 1),
        "staged_with": "the run's flags and code path on XLA:CPU; the weights built from the config, then placeholders; the "
                       "demo's text at the run's shapes (the evaluation: the run's local --eval_file, else one demo "
                       "batch); 2 epochs of 2 steps; no checkpoint or export (plan_rehearsal.py)",
    }


def rehearsal_lines(report: dict) -> list[str]:
    """Per target: each graph the run compiles with its TPU peak and compile seconds; whether the largest fits."""
    lines = []
    for name, target in report["targets"].items():
        rehearsal = target.get("rehearsal")
        if not rehearsal:
            continue
        lines.append(f"rehearsal on {name}: {len(rehearsal['graphs'])} graph(s); "
                     f"{'fits' if rehearsal['fits'] else 'does NOT fit'} (largest: {rehearsal['largest']}, "
                     f"{rehearsal['largest_peak_bytes'] / 2 ** 30:.2f} GiB of {target['usable_hbm_bytes'] / 2 ** 30:.2f}); "
                     f"TPU compile {rehearsal['compile_seconds_before_first_step']} s before the first step, "
                     f"{rehearsal['compile_seconds_whole_run']} s in the whole run")
        if rehearsal["graphs_after_the_first_epoch"]:
            lines.append(f"  warning: {rehearsal['graphs_after_the_first_epoch']} graph(s) first cut in the second epoch: "
                         f"a real run would compile again there, or the rehearsal is not faithful to this recipe "
                         f"(docs/plan.md#rehearse)")
        for graph in rehearsal["graphs"]:
            shapes = ", ".join(f"{key} {'x'.join(map(str, shape))}" for key, shape in (graph["batch_shapes"] or {}).items())
            flops = f"{graph['flops']:.3g}" if graph["flops"] is not None else "n/a"
            lines.append(f"  {graph['number']}. {graph['kind']}" + (f" ({shapes})" if shapes else "") +
                         f": peak {graph['peak_bytes'] / 2 ** 30:.3f} GiB, compile {graph['compile_seconds']} s, "
                         f"FLOPs {flops}, collectives {graph['collectives']}, reached {graph['reached']}x" +
                         (f"; may differ on a TPU: {', '.join(graph['tpu_lowering_may_differ'])}"
                          if graph["tpu_lowering_may_differ"] else ""))
    return lines


def rehearsal_refusal(report: dict) -> str | None:
    """The line --rehearse ends with (exit status 3) where a graph is past a target's HBM, else None."""
    for name, target in report["targets"].items():
        over = [graph for graph in (target.get("rehearsal") or {}).get("graphs", [])
                if graph["fits"] is False or graph["peak_bytes"] > target["usable_hbm_bytes"]]
        if over:
            graph = over[0]
            said = graph.get("said") or (f"Used {graph['peak_bytes'] / 2 ** 30:.2f}G of "
                                         f"{target['usable_hbm_bytes'] / 2 ** 30:.2f}G hbm")
            return f"error: rehearse for {name}: graph {graph['number']} ({graph['kind']}) does not fit: {said}"
    return None


def stand_in_data(config, folder: Path, global_batch: int, eval_rows: int, tokenizer) -> dict:
    """CSV files of the demo's rows repeated: enough for STEPS_PER_EPOCH steps an epoch and one eval batch (a causal
    LM's blocks counted with the run's `tokenizer`)."""
    from .config.defaults import DEMO_DATA_DIR

    files = {}
    for split, wanted in (("train", STEPS_PER_EPOCH * global_batch), ("eval", eval_rows)):
        with open(DEMO_DATA_DIR / f"{split}.csv", newline="") as handle:
            rows = list(csv.reader(handle))
        header, body = rows[0], rows[1:]
        if len(header) == 1:  # causal LM: text only, packed into blocks of max_seq_length tokens: enough rows for
            # `wanted` blocks, the rows' tokens counted once, with a quarter more for what packing drops
            tokens = max(1, sum(len(tokenizer(row[0])["input_ids"]) for row in body))
            wanted = len(body) * (wanted * config.max_seq_length * 5 // (4 * tokens) + 1)
        path = folder / f"{split}.csv"
        with open(path, "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(header)
            writer.writerows((body * (wanted // len(body) + 1))[:wanted])
        files[split] = str(path)
    return files
