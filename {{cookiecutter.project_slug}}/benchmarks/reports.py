"""Turn what the benchmarks recorded into tables, one figure and a short summary.

A record is a benchmark's group, name, outcome, pytest-benchmark median and `extra_info`.
  results.md   every group, every scalar of `extra_info` as a column (the full data; the JSON has more);
  summary.md   the README's view: for the groups in VIEWS, at most 8 columns that answer the group's
               question, with the sentence those numbers support;
  results.png  one figure: graphs per batching choice and per loop, precision, fine-tuning updates kept,
               shared-model memory.
`extra_info["headline"]` names the figure that the terminal summary prints. A record and how its values print
are records.py's; the figure is drawn by figures.py.
"""

import re
from dataclasses import dataclass
from pathlib import Path

from .figures import plot
from .records import by_group, flatten, format_value, with_unit

MARKDOWN_NAME = "results.md"
SUMMARY_NAME = "summary.md"
PLOT_NAME = "results.png"
HIDDEN = ("headline", "reason", "differences")  # the reason is in the status column, differences under the table
MAX_COLUMNS = 8


@dataclass(frozen=True)
class View:
    """A group as the README shows it: the columns that answer its question, and what they support."""

    columns: tuple[str, ...]
    says: str


VIEWS = {
    "recompilation: eval batching": View(
        ("eval_batch_size", "last_batch", "padding", "eval_compilations", "graphs_added_over_default",
         "examples_counted", "eval_set_size", "tpu_eval_compile_s_v5e_1"),
        "Graphs that each evaluation choice compiles in a run that first trained with batch {train_batch_size}, and how "
        "many it "
        "adds over the project's default (eval batch = train batch, last batch padded with masked rows, fixed "
        "length). Later evaluations compiled nothing in any row. The last column is what those evaluation graphs "
        "cost the TPU's compiler, in seconds on this machine's CPU (plan.py --rehearse of the project's run with the "
        "row's eval batch size and padding, libtpu for one v5e chip, no TPU; each graph's peak and the v6e figures "
        "are in results.md's extra_info): the project's run pads its last batch, so the rows that drop it or keep "
        "it ragged have none. It is rehearsed in the full profile, or where BENCH_TPU=1 asks.",
    ),
    "recompilation: loops": View(
        ("compilations", "recompilations", "compile_seconds", "steady_step_s", "wall_s", "compilations_vs_project",
         "wall_vs_project"),
        "Four training loops on the same model, data, length, epochs and learning rate, in float32, with a ragged "
        "last training batch and an eval set that is not a multiple of 32; the project's loop and both Trainer rows "
        "clip the gradients' global norm at 1.0 and decay the rate linearly from its peak without warm-up (Trainer's "
        "defaults), Accelerate's example clips nothing and warms up over 100 steps: graphs compiled, those compiled after "
        "warm-up (recompilations, found by the project's watch), compile and wall seconds, the steady step time "
        "(median time between two steps that compiled nothing), and ratios to the project's loop. The wall ratios "
        "are one run of each loop: within 25 % of 1 (the project's loop without the watch) they are within this "
        "machine's noise, not a finding.",
    ),
    "loops: steady step against the tuned Trainer": View(
        ("steady_step_vs_tuned_trainer", "steady_ratio_range", "wall_vs_tuned_trainer", "wall_ratio_range",
         "project_steady_step_s", "watch_host_share", "rounds"),
        "The project's loop and the TPU-tuned Trainer on the loops' workload, in float32 and in bf16 autocast (the "
        "project's default precision; Trainer's bf16=True), run one after the other `rounds` times, each round in "
        "the other order than the last, with nothing else running (`pytest benchmarks -m timing`): the project's "
        "steady step and wall time over the Trainer's (below 1, the project's loop is faster), each the median of "
        "the rounds' ratios with their range; the project's median steady step in seconds (the Trainer's is in "
        "results.md); and the watch's own checks, timed inside each of the project's runs, as a share of its wall "
        "time.",
    ),
    "logging: cost": View(
        ("logging_steps", "steady_step_s", "no_logs_steady_step_s", "steady_step_vs_no_logs", "logs",
         "device_to_host_transfers", "compilations"),
        "The steady step time (median time between two steps that compiled nothing) with a log at every step, "
        "against the same loop without logs, measured in the same run: the project's loop, which reads each log on "
        "a thread of its own, and the TPU-tuned Trainer, which reads the loss on the host at each log. Each ratio is "
        "one run of each loop: within 25 % of 1 it is within this machine's noise (runs of one loop here spread that "
        "much), so neither a ratio below 1 nor one above is a finding.",
    ),
    "precision": View(
        ("model", "mode", "graph_types", "step_median_s", "state_bytes", "loss_drift", "tpu_step_v5e_4"),
        "What each bf16 mode puts in the graph (element types read from the lowered graph), the bytes of weights "
        "and AdamW state as the device stores them (read from the graph's device data, not computed from dtypes), "
        "the steady step time, and the loss drift from fp32 after the same steps. bf16 speed is a TPU property: "
        "the step times compare rows on this CPU only. The last column is the TPU compiler's "
        "answer for the project's run at that level (plan.py --rehearse, libtpu for a 4-chip v5e slice, no TPU): the "
        "steady training step's peak HBM per chip and a hash of the program it made; two levels with the same hash "
        "hand the TPU the same program (the v6e figures are in results.md's extra_info). It is rehearsed in the full "
        "profile, or where BENCH_TPU=1 asks.",
    ),
    "precision: fine-tuning": View(
        ("fraction_changed", "update_norm_vs_fp32", "eval_accuracy", "eval_perplexity", "eval_loss_gap_to_host",
         "state_bytes_per_device", "steady_step_s", "compilations"),
        "Fine-tuning the same float32-pretrained demo model for the same steps (without weight decay, so that a changed "
        "element is a kept gradient update) at a fine-tuning learning rate "
        "({learning_rate}) for {optimizer_steps} optimizer steps, the default bf16 changes at least 99 % of the linear "
        "layers' weight "
        "elements, as fp32 does, while each pure bf16 level without Kahan summation changes fewer, in half the "
        "state bytes, and Kahan summation brings the norm of the whole update closer to fp32's for one more "
        "weight-sized bf16 buffer. Each element is compared in the type the level stores it (the pure levels' "
        "start rounded to bf16); the eval metric is the run's, its loss gap relative to the exported model "
        "re-evaluated in float32 on the host; bytes are weights + AdamW state per device as the graph stores them. "
        "The quick profile runs two levels at a time, one CPU core each, with LLVM's optimisations off: its step "
        "times compare levels, nothing more.",
    ),
    "shared-model-memory": View(
        ("workers", "per_worker_pss_bytes", "shared_fork_pss_bytes", "shared_pickled_pss_bytes",
         "per_worker_over_shared_fork", "per_worker_over_shared_pickled"),
        "Host memory (Pss summed over the launcher and its workers, at the peak) when every worker builds the model, "
        "when the model is built once and forked, and when it is pickled to the workers as on a TPU runtime.",
    ),
    "checkpoints": View(
        ("save_steps", "checkpoints_written", "seconds_per_save", "step_s_with_step_saves", "step_s_epoch_saves_only",
         "step_time_with_over_without", "sha256_s_per_gb"),
        "The project's loop with a checkpoint after each epoch, then also every few steps, one run after the other: "
        "what one save takes, the step time amortised over the epochs after the first (saves included, compile "
        "time taken out) with and without the step checkpoints (both runs compile the same graphs: the benchmark "
        "fails otherwise), and the seconds per GB of the sha256 that each save and resume computes for the "
        "checkpoint's manifest, on 256 MiB of random bytes.",
    ),
    "fsdp: devices": View(
        # At most MAX_COLUMNS - 1 after the name: the fraction of the whole, which the sentence promises, is kept.
        ("devices", "per_device_batch", "steady_step_s", "compilations", "parameter_bytes_per_device",
         "optimizer_bytes_per_device", "state_bytes_vs_whole"),
        "The same training (float32, the same global batch: devices x per_device_batch) with FSDPv2 over 1, 2 and 4 XLA "
        "devices: the bytes of weights "
        "and AdamW state the busiest device holds (read from its shards) and that as a fraction of the whole model's, "
        "graphs compiled (their seconds are in results.md), and the "
        "steady step time. The devices here share two CPU cores: the step time is what sharding costs on the CPU, "
        "not what more TPU chips gain.",
    ),
    "causal-lm: packing": View(
        ("padding", "compilations", "recompilations", "train_padding_fraction", "steady_tokens_per_second",
         "train_rows"),
        "The causal-LM demo laid out three ways: packed blocks of max_seq_length tokens (fixed), one text per row "
        "padded to the longest text (longest), one text per row padded per batch (dynamic). Graphs compiled, those "
        "after warm-up, the share of padding in the training batches, and the real (unpadded) tokens trained per "
        "second in the epochs after the first (computed: measured examples per second times real tokens per row). "
        "Their eval perplexities (in results.md) are not comparable: packed blocks are evaluated across text "
        "boundaries, rows one text at a time.",
    ),
    "causal-lm: generation": View(
        ("generated_on", "new_tokens_per_second", "new_tokens", "graphs", "device_over_host"),
        "predict.py continuing the same {prompts} prompts ({new_tokens} new tokens in all) with the demo's model "
        "(untrained), greedily, in float32: on the device "
        "(a static KV cache, batches of 8, its rate after the first batch, which compiles the graphs) and on the host's "
        "CPU (transformers' generate(), one prompt at a time). New tokens counted up to each end token; graphs "
        "compiled. On XLA:CPU the device is this machine's CPU too: the ratio is what batching and the static cache "
        "give here, not what a TPU gives.",
    ),
    "causal-lm: loops": View(
        # The graphs' ratio is left out: the project's 2 are in the same column.
        ("graphs", "recompilations", "compile_seconds", "steady_tokens_per_second", "model_flops_per_second_per_chip",
         "wall_s", "tokens_per_second_vs_project", "wall_vs_project"),
        "The project's loop and TRL's SFTTrainer on one workload (the demo's tiny Llama, same seed, the same packed "
        "blocks, global batch {global_batch}, the same optimizer steps and learning rate, an evaluation after each epoch, float32): "
        "graphs compiled, those after warm-up (recompilations, found by the project's watch), compile and wall "
        "seconds, real tokens per second at the steady step time, the model FLOP/s per chip they come to (computed from "
        "those tokens and the model's FLOPs per token, 6N + 12LHQT, not measured), and ratios to the project's loop. "
        "A set-up that "
        "does not train on XLA here says why under the table.",
    ),
    "causal-lm: lead over SFTTrainer": View(
        ("project_tokens_per_second", "sft_tokens_per_second", "tokens_per_second_lead", "lead_range", "wall_vs_sft",
         "wall_range", "rounds"),
        "The project's loop and SFTTrainer as it trains on XLA here (the loops' sft-runs-on-xla row) on the same "
        "workload, run one after the other `rounds` times, each round in the other order than the last, with nothing "
        "else running (`pytest benchmarks -m timing`): each loop's median real tokens per second at the steady step, "
        "the project's over SFTTrainer's (above 1, the project's loop is faster) and the project's wall time over "
        "SFTTrainer's. Each ratio is the median of the rounds' ratios; the range is theirs.",
    ),
    "lora": View(
        ("trainable_parameters_lora", "total_parameters_lora", "optimizer_bytes_per_device_full",
         "optimizer_bytes_per_device_lora", "steady_step_s_full", "steady_step_s_lora", "compilations_lora"),
        "Full fine-tuning and LoRA (peft, r={lora_r}, peft's default target modules) on the demo, one run each, float32, one "
        "device: the parameters LoRA trains of the total, the AdamW state bytes one device holds (computed from the "
        "optimizer's state tensors), the steady step time, and the graphs compiled with LoRA (the same as without, "
        "asserted). On the "
        "demo's tiny model the frozen base still runs forward and backward, so the step time says little; the "
        "optimizer state is what the adapters save.",
    ),
    "full size: host against chip": View(
        ("tracing_ms", "steps_per_execution", "host_over_chip_v5e", "host_over_chip_v6e", "host_over_chip_v7x",
         "tracing_vs_plain", "layers"),
        "The host's time to trace one training step (median of the steady steps, from its first operation to the "
        "graph's hand-over) at the default model's real layer and tensor count ({model}: {layers} layers, {tensors} "
        "tensors), 64 wide so that XLA:CPU runs it "
        "cheaply (tracing follows the count of operations and tensors, not their sizes), at the baked batch and "
        "length, float32: a bare lazy loop (plain), the project's step traced op by op (project-lazy) and as one "
        "JAX function (project-jax, --step_function jax), with 4 and 16 steps a call (project-jax-k4, -k16: "
        "--steps_per_execution, per step), the defaults with the K auto takes on each chip (project-default), and the "
        "TPU-tuned Trainer's step (TRL's SFTTrainer's for the "
        "language model) called method by method as its loop calls them, each step dropped uncompiled and traced "
        "again from the same state. Against it the full model's compute at 50 % of the peak of a v5e, a v6e and a TPU7x "
        "device (half a chip) (computed from its FLOPs, not measured); host over chip above 1 means the chip would wait. "
        "The chips' milliseconds are in results.md.",
    ),
    "recompilation: compilation cache": View(
        ("cache_hits", "cache_misses", "cache_read_failures", "cold_cache_misses"),
        "PyTorch/XLA's persistent compilation cache read back by a second run of the default evaluation.",
    ),
    "data at size": View(
        ("seconds", "tokens_per_second", "seconds_vs_example_pipeline", "second_run_seconds", "peak_uss_bytes",
         "peak_heap_bytes", "peak_heap_growth_bytes"),
        "A real corpus made at run time (this environment's Python sources: whole files as JSON lines for a causal LM, "
        "labelled 500-character snippets as CSV for a classifier) of 1 MB (the quick profile) and 50 and 200 MB "
        "(`--bench-profile data`), prepared with a 32000-token byte-level BPE, 2 workers and 128-token rows: the "
        "project's load_examples (then again in a new process on the same datasets cache: second_run_seconds), "
        "transformers' example script's preparation (run_clm.py's or run_glue.py's) and, for a causal LM, TRL's "
        "pack_dataset (its default bfd strategy cuts every text at 128 tokens and drops the rest) and the project's "
        "streaming (one pass over the stream). Seconds inside each row's own process, the prepared train set's real "
        "tokens per second, the peak Uss summed over the process and its datasets workers (the memory only they "
        "hold), the heap alone (the written pages no file backs: Uss also counts the cache files a row has "
        "just written, dirty page cache until written back), the ratio to the example pipeline's seconds, and the "
        "heap's growth over the same row's at the smallest size.",
    ),
}


def _columns(rows):
    columns = []
    for row in rows:
        columns += [key for key in row if key not in columns and key not in HIDDEN]
    return columns


def markdown(records, title: str) -> str:
    """One table per group; values shared by every row of a group are said once above it."""
    lines = [f"# {title}", ""]
    for group, members in by_group(records).items():
        rows = [flatten(record.extra_info) for record in members]
        columns = _columns(rows)
        common = [key for key in columns if len(rows) > 1 and len({repr(row.get(key)) for row in rows}) == 1]
        varying = [key for key in columns if key not in common and key != "status"]
        lines += [f"## {group}", ""]
        if common:
            lines += ["Same in every row: " + ", ".join(f"{key}={format_value(key, rows[0][key])}" for key in common), ""]
        header = ["benchmark", "status", *(with_unit(key) for key in varying), "job wall (s)"]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for record, row in zip(members, rows, strict=True):
            status = record.status
            if record.extra_info.get("reason"):
                status = f"{status}: {format_value('reason', record.extra_info['reason'])}"
            cells = [record.name, status, *(format_value(key, row.get(key)) for key in varying)]
            cells.append(format_value("wall_s", record.wall_s))
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def view_markdown(records, title: str) -> str:
    """The README's tables: the groups in VIEWS, their chosen columns, the sentence they support."""
    lines = [f"# {title}", ""]
    groups = by_group(records)
    for group, view in VIEWS.items():
        if group not in groups:
            continue
        members = groups[group]
        rows = [flatten(record.extra_info) for record in members]
        columns = [key for key in view.columns if any(key in row for row in rows)][: MAX_COLUMNS - 1]
        lines += [f"## {group}", "", filled(view.says, rows), ""]
        header = ["benchmark", *(with_unit(key) for key in columns)]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for record, row in zip(members, rows, strict=True):
            name = record.name if record.status == "ok" else f"{record.name} ({record.status})"
            lines.append("| " + " | ".join([name, *(format_value(key, row.get(key)) for key in columns)]) + " |")
        differences = [(record.name, record.extra_info["differences"]) for record in members
                       if record.extra_info.get("differences")]
        if differences:
            lines += ["", "How the loops differ (everything else is the same):", ""]
            lines += [f"- **{name}**: {text}." for name, text in differences]
        causes = [(record.name, record.extra_info["recompilation_causes"]) for record in members
                  if record.extra_info.get("recompilation_causes") not in (None, "none")]
        if causes:  # the watch's account of each recompilation: what the table's count is made of
            lines += ["", "Recompilations and their causes (the project's graph watch):", ""]
            lines += [f"- **{name}**: {format_value('recompilation_causes', _short_paths(text))}" for name, text in causes]
        failed = [(record.name, record.extra_info["reason"]) for record in members
                  if record.status == "error" and record.extra_info.get("reason")]
        if failed:  # a measurement of its own: what stopped the set-up, in one line
            lines += ["", "Did not run here:", ""]
            lines += [f"- **{name}**: {format_value('reason', reason)}" for name, reason in failed]
        lines.append("")
    return "\n".join(lines)


def filled(says: str, rows: list[dict]) -> str:
    """A view's sentence with each {key} replaced by the group's value of it (the same in every row, or the rows'
    values joined), so that a figure it quotes is the run's."""
    def value(match):
        found = {format_value(match[1], row[match[1]]) for row in rows if match[1] in row}
        return "/".join(sorted(found)) if found else "n/a"

    return re.sub(r"\{(\w+)\}", value, says)


def _short_paths(text: str) -> str:
    """A source path as its folder and file (benchmarks/measure_recompilation.py): where the run was baked says nothing."""
    return re.sub(r"(?<![\w.])(?:/[^/\s():]+)+/([^/\s():]+/[^/\s():]+\.py)", r"\1", text)


def summary(records) -> list[str]:
    lines = []
    for group, members in by_group(records).items():
        lines.append(f"{group}:")
        for record in members:
            figure = f"{record.headline_key}={format_value(record.headline_key, record.headline)}"
            reason = f" ({record.extra_info['reason']})" if record.extra_info.get("reason") else ""
            lines.append(f"  {record.name:<48} {record.status:<8} {figure}{reason}")
    return lines


def write(records, folder: Path, title: str) -> dict[str, Path]:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    table = folder / MARKDOWN_NAME
    table.write_text(markdown(records, title) + "\n")
    view = folder / SUMMARY_NAME
    view.write_text(view_markdown(records, title) + "\n")
    return {"table": table, "summary": view, "plot": plot(records, folder / PLOT_NAME)}
