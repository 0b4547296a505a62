"""Train on every host of a TPU pod with PyTorch/XLA's own multi-host runtime.

    python scripts/launch_pod.py --tpu-name NAME --zone ZONE --project PROJECT [--dry-run] [-- TRAINING OPTIONS]

(or set TPU_NAME, ZONE and PROJECT_ID). Three steps, each one `gcloud` command for all
workers at once: copy this folder to every host, install it there, then start the same
training command on every host. Each host's launcher starts one process per local chip and
the PJRT runtime joins the hosts into one job; nothing here coordinates them.

Why not `accelerate launch --tpu_cluster`: it imports torch_xla.distributed.xla_dist,
which torch_xla 2.1 removed. This is PyTorch/XLA's documented pod recipe instead.
"""

import argparse
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
REMOTE_DIR = {{ cookiecutter.project_slug | tojson }}
{%- if cookiecutter.variants == "notebook" %}
ENTRY = ["-m", {{ (cookiecutter.project_slug ~ ".cli") | tojson }}]
{%- else %}
ENTRY = ["train.py"]
{%- endif %}
# What never travels: environments, caches and results are per host (and large).
NOT_COPIED = {".git", ".venv", "outputs", "__pycache__", ".pytest_cache", ".ruff_cache", ".benchmarks", "benchmark-results"}
# argument, environment variable, what it is
REQUIRED = (
    ("tpu_name", "TPU_NAME", "TPU name"),
    ("zone", "ZONE", "zone"),
    ("project", "PROJECT_ID", "project"),
)


def parse(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="Options after -- go to the training script.")
    parser.add_argument("--tpu-name", default=os.environ.get("TPU_NAME"), help="TPU name (default: $TPU_NAME)")
    parser.add_argument("--zone", default=os.environ.get("ZONE"), help="TPU zone, such as us-central2-b (default: $ZONE)")
    parser.add_argument("--project", default=os.environ.get("PROJECT_ID"), help="Google Cloud project (default: $PROJECT_ID)")
    parser.add_argument("--config", default="configs/tpu-vm.yaml", help="Accelerate config used on every host")
    parser.add_argument("--remote-dir", default=REMOTE_DIR, help="Folder on each host, relative to its home")
    parser.add_argument("--no-install", action="store_true", help="Skip `pip install -e '.[tpu]'` on the hosts")
    parser.add_argument("--dry-run", action="store_true", help="Print the gcloud commands instead of running them")
    parser.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then options for the training script")
    args = parser.parse_args(argv)
    if args.train_args[:1] == ["--"]:
        args.train_args = args.train_args[1:]
    return args


def missing(args: argparse.Namespace) -> list[str]:
    return [f"--{name.replace('_', '-')}/${variable}" for name, variable, _ in REQUIRED if not getattr(args, name)]


def files_to_copy(root: Path = PROJECT) -> list[str]:
    return sorted(
        entry.name for entry in root.iterdir() if entry.name not in NOT_COPIED and not entry.name.endswith(".egg-info")
    )


def gcloud(verb: str, args: argparse.Namespace, *operands: str) -> list[str]:
    target = ["--zone", args.zone, "--project", args.project, "--worker=all"]
    return ["gcloud", "compute", "tpus", "tpu-vm", verb, *operands, *target]


def on_all_workers(args: argparse.Namespace, command: str) -> list[str]:
    return gcloud("ssh", args, args.tpu_name, f"--command={command}")


def commands(args: argparse.Namespace, root: Path = PROJECT) -> list[tuple[str, list[str]]]:
    """The steps as (name, argv); run from the project folder."""
    remote = shlex.quote(args.remote_dir)
    # `python3 -m accelerate.commands.launch` is `accelerate launch` without relying on PATH over ssh.
    launch = ["python3", "-m", "accelerate.commands.launch", "--config_file", args.config, *ENTRY, *args.train_args]
    steps = [
        ("make the folder", on_all_workers(args, f"mkdir -p {remote}")),
        ("copy", gcloud("scp", args, "--recurse", *files_to_copy(root), f"{args.tpu_name}:{args.remote_dir}")),
    ]
    if not args.no_install:
        steps.append(("install", on_all_workers(args, f'cd {remote} && python3 -m pip install -e ".[tpu]"')))
    steps.append(("train", on_all_workers(args, f"cd {remote} && PJRT_DEVICE=TPU {shlex.join(launch)}")))
    return steps


def main(argv=None) -> int:
    args = parse(argv)
    absent = missing(args)
    if absent:
        print(f"error: name the TPU to launch on; missing {', '.join(absent)}", file=sys.stderr)
        return 2
    steps = commands(args)
    if args.dry_run:
        for _, argv_ in steps:
            print(shlex.join(argv_))
        return 0
    if shutil.which("gcloud") is None:
        print("error: gcloud is not on PATH; install the Google Cloud CLI or use --dry-run", file=sys.stderr)
        return 2
    for name, argv_ in steps:
        print(f"[{name}] {shlex.join(argv_)}", flush=True)
        code = subprocess.run(argv_, cwd=PROJECT).returncode
        if code != 0:
            print(f"error: step '{name}' failed with exit code {code}", file=sys.stderr)
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
