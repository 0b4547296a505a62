"""The one figure of the benchmark results: graphs per batching choice and per loop, precision, fine-tuning, memory.

Drawn with matplotlib (headless: the Agg backend); reports.py writes it as results.png.
"""

from pathlib import Path

from .records import by_group


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
    """One figure: graphs per batching choice and per loop, precision, fine-tuning updates kept, shared-model memory.

    A panel appears only when its benchmarks ran; nothing that is constant across its rows is drawn.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = by_group(records)
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
    tuned = ok.get("precision: fine-tuning", [])
    if tuned:
        marked = [i for i, r in enumerate(tuned) if r.extra_info.get("level") == "bf16"]  # the default
        rate = tuned[0].extra_info.get("learning_rate")
        title = f"fine-tuning{f' at {rate:g}' if rate else ''}: linear-weight elements changed (default in orange)"
        panels.append(lambda axis: _bar_panel(
            axis, [r.extra_info.get("level", r.name) for r in tuned], [r.extra_info.get("fraction_changed") or 0 for r in tuned],
            title, "fraction of elements", marked))
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
