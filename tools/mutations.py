"""Named mutations of the modules whose tests train nothing or little; `make mutation` runs them (outside make test).

Each mutation is a small wrong change a person could make (a bound off by one, a check dropped, an order reversed).
It is applied to a fresh bake of the default project, the module's own tests run, and the mutation is *killed* when
they fail, *survives* when they pass. The score per module goes to benchmark-results/mutation.md; the goal is no
survivor, and the run exits 1 while one survives. The originals are checked to be in the code (once each) by
tests/test_mutations.py in make check, so that the list cannot silently stop matching what it mutates.

Usage: python tools/mutations.py [OUTPUT.md] (the environment's python, torch_xla installed).
"""

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(TEMPLATE))
SLUG = "tpu_text_classifier"


@dataclass(frozen=True)
class Mutation:
    module: str  # under the baked package
    old: str  # found exactly once in the module
    new: str
    tests: tuple[str, ...]  # pytest selections in the bake that must catch it
    what: str


CHECKS = ("tests/test_schedules.py", "tests/test_cli.py", "-m", "not slow")
TRUST = ("tests/test_checkpoint_trust.py",)
MUTATIONS = [
    Mutation("planning/estimate.py", "rows = -(-shape[0] // shards) if shape else 1", "rows = shape[0] if shape else 1",
             ("tests/test_plan.py", "-m", "not slow"), "fsdp's split of the state over the chips forgotten"),
    Mutation("planning/start_check.py", "if peak <= device_bytes * (1 + margin):", "if peak <= device_bytes:",
             ("tests/test_plan.py", "-m", "not slow"), "a run stopped within the estimate's measured error"),
    Mutation("planning/start_check.py", "if peak <= device_bytes:\n        return lines, None",
             "if peak <= device_bytes * (1 + margin):\n        return lines, None",
             ("tests/test_plan.py", "-m", "not slow"), "a run over its device's memory, within the error, not warned"),
    Mutation("planning/timing.py", "seconds = max(at_mfu, roofline)", "seconds = at_mfu",
             ("tests/test_plan.py", "-m", "not slow"), "a step's time shorter than its roofline"),
    Mutation("planning/start_check.py", "margin, what = 0.0, (", "margin, what = MEASURED_ERROR[\"causal-lm\"], (",
             ("tests/test_plan.py", "-m", "not slow"), "a kept rehearsal's peak given the estimate's margin"),
    Mutation("config/checks.py", "if not 0 <= config.warmup_ratio < 1:", "if not 0 <= config.warmup_ratio <= 1:",
             CHECKS, "a warm-up ratio of 1 (no step after the warm-up) allowed"),
    Mutation("config/checks.py", "and not isinstance(value, bool) and value >= least", "and value >= least",
             CHECKS, "True taken as the whole number 1"),
    Mutation("config/checks.py", "if config.warmup_steps and config.warmup_ratio:",
             "if config.warmup_steps and config.warmup_ratio and False:", CHECKS, "both warm-ups at once allowed"),
    Mutation("config/checks.py", "if config.resume and config.overwrite_output_dir:",
             "if config.resume and config.overwrite_output_dir and False:", CHECKS,
             "--resume with --overwrite_output_dir allowed"),
    Mutation("data/batching.py", "return math.ceil(num_examples / per_round) * per_round",
             "return num_examples // per_round * per_round", ("tests/test_evaluation_counts.py", "tests/test_training.py"),
             "the padded eval set rounded down: its last examples never evaluated"),
    Mutation("data/batching.py", "rows.unflatten(0, (-1, count))", "rows.unflatten(0, (count, -1)).transpose(0, 1)",
             ("tests/test_accumulation.py", "-k", "micro"), "micro-batches of consecutive rows, not strided ones"),
    Mutation("precision/fixed_point.py", "return torch.round(losses * SCALE).long()",
             "return (losses * SCALE).long()", ("tests/test_evaluation_counts.py",),
             "losses truncated toward 0 instead of rounded"),
    Mutation("precision/fixed_point.py", "return torch.where(finite, to_fixed(losses), 0), (~finite).long()",
             "return torch.where(finite, to_fixed(losses), 0), finite.long()", ("tests/test_loss_guard.py",),
             "the finite losses counted as the non-finite ones"),
    Mutation("data/formats.py", "pc.or_(pc.equal(pc.binary_length(values), 0), pc.utf8_is_space(values))",
             "pc.equal(pc.binary_length(values), 0)", ("tests/test_data_files.py", "-m", "not slow"),
             "a text of white space only taken as text to train on"),
    Mutation("fault_tolerance/checkpoint_schedule.py", "global_step % self.save_steps == 0",
             "global_step % self.save_steps == 1", ("tests/test_resume.py", "-k", "save_policy or step_checkpoints_add"),
             "step checkpoints one step late"),
    Mutation("fault_tolerance/checkpointing.py", "for path in done[:-keep]:", "for path in done[:-keep - 1]:",
             ("tests/test_resume.py", "-k", "step_checkpoints_add"), "one checkpoint more kept than asked"),
    Mutation("fault_tolerance/manifest.py", 'if size != entry["bytes"]:', 'if size > entry["bytes"]:', TRUST,
             "a truncated file named as a checksum mismatch, not by its size"),
    Mutation("fault_tolerance/manifest.py", "return names[index::count]", "return names[index::count + 1]", TRUST,
             "the hashing shared out with files left unchecked"),
    Mutation("fault_tolerance/manifest.py", 'if written.get("files_sha256") != _digest_of(files):',
             'if written.get("files_sha256") is None:', TRUST, "the manifest's own checksum not compared"),
    Mutation("fault_tolerance/resume.py", "if name in recorded and recorded.get(name) != now.get(name):",
             "if name in recorded and recorded.get(name) != now.get(name) and name != 'max_seq_length':", TRUST,
             "a new max_seq_length resumed"),
    Mutation("fault_tolerance/resume.py", "(path.name == named, reached(path)), reverse=True",
             "(path.name == named, reached(path)), reverse=False", TRUST, "the oldest checkpoint tried first"),
    Mutation("fault_tolerance/resume_changes.py", "run.global_step, run.resumed_step = trained // new, step",
             "run.global_step, run.resumed_step = trained // old, step", TRUST,
             "a new step size resumed at the old step count"),
    Mutation("fault_tolerance/resume_changes.py",
             "[new_rate if base == old_rate else base * new_rate / old_rate for base in inner.base_lrs]",
             "list(inner.base_lrs)", TRUST, "a new learning rate ignored (as LambdaLR restores it)"),
    Mutation("tasks/text_classification.py",
             "predicted, present = sum(row[label] for row in confusion), sum(confusion[label])",
             "present, predicted = sum(row[label] for row in confusion), sum(confusion[label])",
             ("tests/test_evaluation_counts.py",), "each label's precision and recall swapped"),
    Mutation("tasks/text_classification.py", "truth = torch.nn.functional.one_hot(labels, classes) * valid.unsqueeze(1)",
             "truth = torch.nn.functional.one_hot(labels, classes)", ("tests/test_evaluation_counts.py",),
             "the padded batch's masked copies counted in the confusion matrix"),
    Mutation("loop/model_card.py", "if value == defaults[option.name] or value is None:",
             "if value == defaults[option.name] or not value:",
             ("tests/test_training.py", "-k", "compilations_do_not_grow"),
             "the card's command line leaves out settings given as 0 or false"),
    Mutation("loop/optimizers.py", '{"params": [p for name, p in trainable if name not in decayed], "weight_decay": 0.0}',
             '{"params": [p for name, p in trainable if name not in decayed], "weight_decay": weight_decay}',
             ("tests/test_trainer_parity.py",), "biases and normalization weights decayed, unlike the Trainer"),
]


def run_tests(project: Path, tests: tuple[str, ...]) -> tuple[bool, float]:
    env = {**os.environ, "PJRT_DEVICE": "CPU", "HF_HUB_OFFLINE": "1", "REQUIRE_XLA": "1"}
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
                            cwd=project, env=env, capture_output=True, text=True)
    return result.returncode == 0, time.perf_counter() - started


def main() -> int:
    from tests.baking import bake_into

    output = Path(sys.argv[1]) if len(sys.argv) > 1 else TEMPLATE / "benchmark-results" / "mutation.md"
    shutil.rmtree(TEMPLATE / "build" / "mutation", ignore_errors=True)
    project = bake_into(TEMPLATE / "build" / "mutation")
    for tests in sorted({mutation.tests for mutation in MUTATIONS}):
        passed, _ = run_tests(project, tests)
        assert passed, f"the unmutated project fails {' '.join(tests)}: fix that first"
    rows, survivors = [], []
    for mutation in MUTATIONS:
        path = project / SLUG / mutation.module
        original = path.read_text()
        assert original.count(mutation.old) == 1, f"{mutation.module}: {mutation.old!r} is not there exactly once"
        path.write_text(original.replace(mutation.old, mutation.new))
        try:
            passed, seconds = run_tests(project, mutation.tests)
        finally:
            path.write_text(original)
        rows.append((mutation, not passed, seconds))
        if passed:
            survivors.append(mutation)
        print(f"{'SURVIVED' if passed else 'killed  '} {mutation.module}: {mutation.what} ({seconds:.0f} s)", flush=True)
    modules = sorted({mutation.module for mutation in MUTATIONS})
    lines = ["# Named mutations (tools/mutations.py)", "", "| module | killed | of | survivors |", "|---|---|---|---|"]
    for module in modules:
        mine = [row for row in rows if row[0].module == module]
        alive = "; ".join(row[0].what for row in mine if not row[1]) or "none"
        lines.append(f"| {module} | {sum(row[1] for row in mine)} | {len(mine)} | {alive} |")
    lines += ["", f"{len(rows) - len(survivors)} of {len(rows)} killed."]
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
