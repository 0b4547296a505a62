"""Turn what the benchmarks recorded into a Markdown table, a PNG plot and a short summary.

Generic on purpose: a record is a benchmark's group, name, outcome, pytest-benchmark
median and `extra_info`. Every scalar of `extra_info` becomes a column of its group's
table; `extra_info["headline"]` names the figure that is plotted and summarised
(the benchmark's own median wall time otherwise).
"""

from dataclasses import dataclass, field
from pathlib import Path

MARKDOWN_NAME = "results.md"
PLOT_NAME = "results.png"
HIDDEN = ("headline", "reason")  # the reason is shown in the status column


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


def plot(records, path: Path) -> Path:
    """One horizontal bar chart per group, of each benchmark's headline figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = _groups(records)
    heights = [max(2.0, 0.35 * len(members) + 1.2) for members in groups.values()]
    figure, axes = plt.subplots(len(groups), 1, figsize=(10, sum(heights)), height_ratios=heights, squeeze=False)
    for axis, (group, members) in zip(axes[:, 0], groups.items(), strict=True):
        names = [record.name for record in members]
        values = [record.headline if isinstance(record.headline, (int, float)) else 0 for record in members]
        colours = ["tab:blue" if record.status == "ok" else "tab:red" for record in members]
        axis.barh(names, values, color=colours)
        for index, record in enumerate(members):
            label = format_value(record.headline_key, record.headline) if record.status == "ok" else record.status
            axis.annotate(label, (values[index], index), xytext=(3, 0), textcoords="offset points", va="center")
        keys = sorted({record.headline_key for record in members})
        axis.set_title(f"{group}: {', '.join(keys)}")
        axis.set_xlim(left=0)
        axis.invert_yaxis()
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
    return {"table": table, "plot": plot(records, folder / PLOT_NAME)}
