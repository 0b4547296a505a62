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


def by_group(records) -> dict:
    """The records of each group, groups and records in the order they ran."""
    groups = {}
    for record in records:
        groups.setdefault(record.group, []).append(record)
    return groups
