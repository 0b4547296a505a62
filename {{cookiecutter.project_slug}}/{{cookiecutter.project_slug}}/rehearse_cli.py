"""plan.py --rehearse's staging process: the run itself on XLA:CPU, every graph it cuts written out and none run.

plan_rehearsal.py starts it (`python -m <package>.rehearse_cli FOLDER CHIPS [plan.py's flags]`): train.py's code path
with plan.py's flags and xla/rehearsal.py's Stage installed. plan_rehearsal.py's docstring says what differs from the
real run.
"""

import json
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from .plan_rehearsal import EPOCHS, STEPS_PER_EPOCH, stand_in_data


class _Staged(Exception):
    """Every graph of the run is cut and written: the staging ends here (a BaseException would skip the loop's own
    end; this one passes through it like a run's stop)."""


def run_model(config, chips: int):
    """The run's architecture at full size, no weight read: on the meta device, which place_lazily places without
    allocating; but with one chip and the data layout (Accelerate's prepare, no SPMD) uninitialised on the host:
    Accelerate ties the optimizer to the moved weights by their data pointers, which the meta device does not have, so
    there the weights are allocated once (on the CPU's XLA device) until the stage makes them stand-ins."""
    from .tasks import task

    model = task.build_shape(config)
    return model.to_empty(device="cpu") if config.parallelism == "data" and chips == 1 else model


def run_tokenizer(config) -> tuple:
    """(the tokenizer the run would use, which): the model's (its folder's, or the hub's cache), else the demo's trained
    on the run's own training file, as the run trains it. The rehearsal's data is stand-in text, but a length under
    --padding dynamic or buckets is the run's tokenizer's, and so is each evaluation shape."""
    from .data.sources import wants_demo
    from .data.tokenizer import load_tokenizer

    if not wants_demo(config.data, config.model):
        try:
            tokenizer = load_tokenizer(config.data, config.model, False)
        except Exception as error:  # no tokenizer files and no hub here
            why = str(error).strip().splitlines()[0][:120] if str(error).strip() else type(error).__name__
        else:
            # transformers makes a tokenizer of its special tokens alone from a folder holding only config.json (a
            # plan.py model folder): every word one unknown token, no length a run would see.
            if len(tokenizer) > len(tokenizer.all_special_tokens):
                return tokenizer, "the model's"
            why = "it has no vocabulary (no tokenizer files beside the config)"
        return load_tokenizer(config.data, config.model, True), f"the demo's (the model's could not be read: {why})"
    return load_tokenizer(config.data, config.model, True), "the demo's"


def place_lazily(stage) -> None:
    """A module on the meta device moved to the XLA device is placed by the stage instead (xla/rehearsal.py's
    Stage.placed): no weight is allocated at full size on any device. Accelerate's prepare, the data layout and
    FSDPv2's wrapper all place the model with Module.to."""
    import itertools

    import torch

    move = torch.nn.Module.to

    def to(module, *args, **kwargs):
        device, dtype, *_ = torch._C._nn._parse_to(*args, **kwargs)
        if device is not None and device.type == "xla" and any(
                tensor.is_meta for tensor in itertools.chain(module.parameters(), module.buffers())):
            # Only what is still on the meta device: FSDPv2 places each wrapped layer first, then the rest from the
            # root, and the order tensors are made in is the order of the graph's inputs (torch_xla orders by id).
            # (Not Module.to_empty: torch_xla's empty_like is a strided view of a hidden base, which a view's
            # in-place updates go on writing into, one graph input more every step.)
            module._apply(lambda tensor: stage.placed(tensor, device, dtype) if tensor.is_meta else tensor)
            return module
        return move(module, *args, **kwargs)

    torch.nn.Module.to = to


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    folder, chips, plan_argv = Path(argv[0]), int(argv[1]), argv[2:]
    from .config.defaults import TRAIN_BATCH_SIZE
    from .loop import fit
    from .loop.training import training_function
    from .plan_cli import parse
    from .precision import bf16_updates
    from .xla.rehearsal import Stage

    config, _ = parse(plan_argv)
    tokenizer, which_tokenizer = run_tokenizer(config)  # before the stand-in data replaces the run's files
    per_chip = config.train_batch_size or TRAIN_BATCH_SIZE
    replicas = chips  # both layouts over SPMD: the batch split over every chip
    scratch = Path(tempfile.mkdtemp(prefix="rehearsal-"))
    global_batch = per_chip * replicas * config.gradient_accumulation_steps
    files = stand_in_data(config, scratch, global_batch, config.per_chip_eval_batch(per_chip) * replicas, tokenizer)
    # The run's own evaluation rows where it names a local file: their count and lengths decide its last batch and,
    # with --padding dynamic or buckets, its shapes (each a graph). Else one batch of the demo's.
    eval_file = config.eval_file if config.eval_file and Path(config.eval_file).is_file() else files["eval"]
    config = replace(
        config, demo=True, train_file=files["train"], eval_file=eval_file, train_batch_size=per_chip,
        learning_rate=config.learning_rate if config.learning_rate is not None else config.pretrained_learning_rate,
        num_epochs=EPOCHS, max_steps=None, max_train_examples=STEPS_PER_EPOCH * global_batch,
        output_dir=str(scratch / "run"), report=None, checkpoint=False, export=False, report_to="none",
        load_best_model_at_end=False, resume=False, watch_compilations=True, profile_steps=None,
    )
    stage = Stage(folder)
    stage.install()
    place_lazily(stage)
    # What a pure bf16 level would lose to rounding is counted on the weights' values: shapes only here.
    bf16_updates.updates_at_risk = lambda model, learning_rate: {"fraction_of_elements": 0.0}
    start = fit.Loop.fit

    def fit_staged(loop, run):
        stage.release_weights()
        start(loop, run)
        stage.write_index()
        context = loop.context
        (folder / "run.json").write_text(json.dumps({
            "step_function": context.step.name, "step_function_why": context.step.why, "layout": context.layout.name,
            "precision": context.precision.effective, "tokenizer": which_tokenizer}) + "\n")
        # The graphs are all cut: what follows (the report, the export) reads the weights, which are placeholders.
        raise _Staged

    fit.Loop.fit = fit_staged
    fit.task.load_tokenizer = lambda *args, **kwargs: tokenizer  # the task's own import of it (tasks/)
    # What the host reads is zeros (xla/rehearsal.py): an evaluation counted no example, so it has no metrics to print.
    fit.task.summary = lambda evaluation: "evaluation staged"
    try:
        training_function(run_model(config, chips), config)
    except _Staged:
        pass
    finally:
        shutil.rmtree(scratch, ignore_errors=True)  # the stand-in data and the run's folder; the graphs stay in FOLDER
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
