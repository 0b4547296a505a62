"""What one benchmark recorded, grouped by benchmark group, and how each recorded value prints.

The shared vocabulary of the report writers: the tables (reports.py) and the figure (figures.py).
"""

from dataclasses import dataclass, field


@dataclass
class Record:
    """One benchmark: its group and name, the pytest outcome, pytest-benchmark's median and its `extra_info`."""

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
    if key.endswith(("_bytes", "_bytes_per_device")) and isinstance(value, (int, float)):
        # The demo's whole training state is about a MiB: two decimals below one, so that levels still differ in print.
        return f"{value / 2**20:.1f} MiB" if value >= 2**20 else f"{value / 2**20:.2f} MiB"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


# The unit each column is read in, from its key's ending (bytes already print as MiB in their cells).
UNITS = (("_bytes", ""), ("_bytes_per_device", ""), ("_ms", "ms"), ("_s", "s"), ("_seconds", "s"), ("_gib", "GiB"),
         ("_per_second", "per s"), ("_per_second_per_chip", "per s per chip"), ("_fraction", "fraction"),
         ("_share", "fraction"), ("_range", "x"), ("_lead", "x"), ("_gap_to_host", "relative"))
RATIO_WORDS = ("_vs_", "_over_", "ratio")


def with_unit(key: str) -> str:
    """'steady_step_s (s)', 'wall_vs_project (x)': a column's header with the unit of its values."""
    unit = next((unit for ending, unit in sorted(UNITS, key=lambda pair: -len(pair[0])) if key.endswith(ending)), None)
    if unit is None and any(word in key for word in RATIO_WORDS):
        unit = "x"
    if unit is None and "fraction" in key:
        unit = "fraction"
    return f"{key} ({unit})" if unit else key


def by_group(records) -> dict:
    """The records of each group, groups and records in the order they ran."""
    groups = {}
    for record in records:
        groups.setdefault(record.group, []).append(record)
    return groups
