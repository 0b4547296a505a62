"""Turn what the benchmarks recorded into tables, one figure and a short summary.

A record is a benchmark's group, name, outcome, pytest-benchmark median and `extra_info`.
  results.md   every group, every scalar of `extra_info` as a column (the full data; the JSON has more);
  summary.md   the README's view: for the groups in VIEWS, at most 8 columns that answer the group's
               question, with the sentence those numbers support;
  results.png  one figure: graphs per batching choice and per loop, precision, shared-model memory.
`extra_info["headline"]` names the figure that the terminal summary prints.
"""

from dataclasses import dataclass, field
from pathlib import Path

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
         "examples_counted", "eval_set_size"),
        "Graphs that each evaluation choice compiles in a run that first trained with batch 16, and how many it "
        "adds over the project's default (eval batch = train batch, last batch padded with masked rows, fixed "
        "length). Later evaluations compiled nothing in any row.",
    ),
    "recompilation: loops": View(
        ("compilations", "recompilations", "compile_seconds", "steady_step_s", "wall_s", "compilations_vs_project",
         "wall_vs_project"),
        "Four training loops on the same model, data, length, epochs and learning rate, in float32, with a ragged "
        "last training batch and an eval set that is not a multiple of 32: graphs compiled, those compiled after "
        "warm-up (recompilations, found by the project's watch), compile and wall seconds, the steady step time "
        "(median time between two steps that compiled nothing), and ratios to the project's loop.",
    ),
    "precision": View(
        ("model", "mode", "graph_types", "step_median_s", "state_bytes", "loss_drift", "compilations"),
        "What each bf16 mode puts in the graph (element types read from the lowered graph), the bytes of weights "
        "and AdamW state as the device stores them (read from the graph's device data, not computed from dtypes), "
        "the steady step time, and the loss drift from fp32 after the same steps. bf16 speed is a TPU property: "
        "XLA:CPU computes bf16 matmuls in float32, so bf16 is not faster here.",
    ),
    "shared-model-memory": View(
        ("workers", "per_worker_pss_bytes", "shared_fork_pss_bytes", "shared_pickled_pss_bytes",
         "per_worker_over_shared_fork", "per_worker_over_shared_pickled"),
        "Host memory (Pss summed over the launcher and its workers, at the peak) when every worker builds the model, "
        "when the model is built once and forked, and when it is pickled to the workers as on a TPU runtime.",
    ),
    "checkpoints": View(
        ("save_steps", "checkpoints_written", "seconds_per_save", "step_s_with_step_saves", "step_s_epoch_saves_only",
         "step_time_with_over_without", "compilations"),
        "The project's loop with a checkpoint after each epoch, then also every few steps, one run after the other: "
        "what one save takes, the step time amortised over the epochs after the first (saves included, compile "
        "time taken out) with and without the step checkpoints, and the graphs compiled (the same in both runs).",
    ),
    "fsdp: devices": View(
        ("devices", "per_device_batch", "steady_step_s", "compilations", "compile_seconds", "parameter_bytes_per_device",
         "optimizer_bytes_per_device", "state_bytes_vs_whole"),
        "The same training (global batch 16, float32) with FSDPv2 over 1, 2 and 4 XLA devices: the bytes of weights "
        "and AdamW state the busiest device holds (read from its shards) and that as a fraction of the whole model's, "
        "graphs compiled and their seconds, and the "
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
    "recompilation: compilation cache": View(
        ("cache_hits", "cache_misses", "cache_read_failures", "cold_cache_misses"),
        "PyTorch/XLA's persistent compilation cache read back by a second run of the default evaluation.",
    ),
}


@dataclass
class Record:
    group: str
    name: str
    outcome: str  # passed, failed or skipped (the pytest test); extra_info["status"] is the measurement's
    wall_s: float | None = None
    extra_info: dict = field(default_factory=dict)

    @property
    def headline_key(self) -> str:
        return self.extra_info.get("headline") or "wall_s"

    @property
    def headline(self):
        if self.headline_key == "wall_s":
            return self.wall_s
        return self.extra_info.get(self.headline_key)

    @property
    def status(self) -> str:
        measured = self.extra_info.get("status")
        if self.outcome != "passed":
            return self.outcome
        return measured or "ok"


def flatten(info: dict, prefix: str = "") -> dict:
    """Scalars only; nested dicts become dotted keys; lists (per-step series) stay in the JSON."""
    flat = {}
    for key, value in info.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        elif value is None or isinstance(value, (bool, int, float, str)):
            flat[name] = value
    return flat


def format_value(key: str, value) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key.endswith("_bytes") and isinstance(value, (int, float)):
        return f"{value / 2**20:.1f} MiB"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _groups(records):
    groups = {}
    for record in records:
        groups.setdefault(record.group, []).append(record)
    return groups


def _columns(rows):
    columns = []
    for row in rows:
        columns += [key for key in row if key not in columns and key not in HIDDEN]
    return columns


def markdown(records, title: str) -> str:
    """One table per group; values shared by every row of a group are said once above it."""
    lines = [f"# {title}", ""]
    for group, members in _groups(records).items():
        rows = [flatten(record.extra_info) for record in members]
        columns = _columns(rows)
        common = [key for key in columns if len(rows) > 1 and len({repr(row.get(key)) for row in rows}) == 1]
        varying = [key for key in columns if key not in common and key != "status"]
        lines += [f"## {group}", ""]
        if common:
            lines += ["Same in every row: " + ", ".join(f"{key}={format_value(key, rows[0][key])}" for key in common), ""]
        header = ["benchmark", "status", *varying, "job wall s"]
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
    groups = _groups(records)
    for group, view in VIEWS.items():
        if group not in groups:
            continue
        members = groups[group]
        rows = [flatten(record.extra_info) for record in members]
        columns = [key for key in view.columns if any(key in row for row in rows)][: MAX_COLUMNS - 1]
        lines += [f"## {group}", "", view.says, ""]
        header = ["benchmark", *columns]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for record, row in zip(members, rows, strict=True):
            name = record.name if record.status == "ok" else f"{record.name} ({record.status})"
            lines.append("| " + " | ".join([name, *(format_value(key, row.get(key)) for key in columns)]) + " |")
        differences = [(record.name, record.extra_info["differences"]) for record in members
                       if record.extra_info.get("differences")]
        if differences:
            lines += ["", "How the loops differ (everything else is the same):", ""]
            lines += [f"- **{name}**: {text}." for name, text in differences]
        lines.append("")
    return "\n".join(lines)


def _bar_panel(axis, labels, values, title, unit, marked=()):
    colours = ["tab:orange" if index in marked else "tab:blue" for index in range(len(labels))]
    axis.barh(labels, values, color=colours)
    for index, value in enumerate(values):
        axis.annotate(f"{value:.3g}", (value, index), xytext=(3, 0), textcoords="offset points", va="center", fontsize=8)
    axis.set_title(title, fontsize=10)
    axis.set_xlabel(unit)
    axis.set_xlim(left=0, right=(max(values) or 1) * 1.25)
    axis.invert_yaxis()


def plot(records, path: Path) -> Path:
    """One figure: graphs per batching choice and per loop, precision, and shared-model memory.

    A panel appears only when its benchmarks ran; nothing that is constant across its rows is drawn.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = _groups(records)
    ok = {group: [r for r in members if r.status == "ok"] for group, members in groups.items()}
    panels = []
    cells = ok.get("recompilation: eval batching", [])
    if cells:
        labels = [f"{r.extra_info.get('eval_batch_size')}/{r.extra_info.get('last_batch')}/{r.extra_info.get('padding')}"
                  + (" (default)" if r.extra_info.get("project_default") else "") for r in cells]
        marked = [i for i, r in enumerate(cells) if r.extra_info.get("project_default")]
        panels.append(lambda axis: _bar_panel(
            axis, labels, [r.extra_info.get("eval_compilations") or 0 for r in cells],
            "graphs compiled by the first evaluation (eval batch/last batch/padding)", "graphs", marked))
    loops = ok.get("recompilation: loops", [])
    if loops:
        marked = [i for i, r in enumerate(loops) if r.extra_info.get("loop") == "project"]
        panels.append(lambda axis: _bar_panel(
            axis, [r.extra_info.get("loop", r.name) for r in loops], [r.extra_info.get("compilations") or 0 for r in loops],
            "graphs compiled by a whole run, per training loop", "graphs", marked))
    precision = [r for r in ok.get("precision", []) if r.extra_info.get("model") == "demo"]
    if precision:
        modes = [r.extra_info.get("mode", r.name) for r in precision]
        for key, title, unit, scale in (
            ("step_median_s", "step time on XLA:CPU (bf16 speed is a TPU property)", "s", 1),
            ("state_bytes", "weights + AdamW state as stored (from the graph)", "MiB", 2**-20),
            ("loss_drift", "loss drift from fp32", "|loss - fp32 loss|", 1),
        ):
            values = [(r.extra_info.get(key) or 0) * scale for r in precision]
            if len(set(values)) > 1:  # no chart of a constant
                panels.append(lambda axis, v=values, t=title, u=unit: _bar_panel(axis, modes, v, f"precision: {t}", u))
    memory = ok.get("shared-model-memory", [])
    if memory:
        def memory_panel(axis):
            workers = [r.extra_info["workers"] for r in memory]
            for key, label in (("per_worker_pss_bytes", "built in each worker"), ("shared_fork_pss_bytes", "shared by fork"),
                               ("shared_pickled_pss_bytes", "shared by pickling (TPU runtime)")):
                axis.plot(workers, [r.extra_info[key] / 2**20 for r in memory], marker="o", label=label)
            axis.set_title("host memory at the peak, launcher + workers", fontsize=10)
            axis.set_xlabel("workers")
            axis.set_ylabel("MiB (Pss)")
            axis.set_xticks(workers)
            axis.legend(fontsize=8)
        panels.append(memory_panel)
    columns = 2
    rows = max(1, -(-len(panels) // columns))
    figure, axes = plt.subplots(rows, columns, figsize=(14, 3.6 * rows), squeeze=False)
    for axis, draw in zip(axes.flat, panels, strict=False):
        draw(axis)
    for axis in list(axes.flat)[len(panels):]:
        axis.axis("off")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def summary(records) -> list[str]:
    lines = []
    for group, members in _groups(records).items():
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
