"""Train on a multi-host TPU slice on GKE: a JobSet manifest, and the same workload as an `xpk workload create`.

    python scripts/launch_gke.py --cluster CLUSTER --workload NAME --tpu-type v5litepod-16 --bucket BUCKET
        (--image IMAGE | --base-image IMAGE) [--topology 4x4] [--max-restarts N] [--run] [-- TRAINING OPTIONS]

Writes the JobSet manifest (`kubectl apply -f` it) and prints the `xpk workload create` command for the
same workload; `--run` runs that command (xpk from $XPK or PATH). Every host runs one process that drives
all of its chips: the fsdp layout (SPMD FSDPv2), whatever this project was baked with, since one process
per host is what GKE's TPU pods run. output_dir is the bucket, mounted on every host by the Cloud Storage
FUSE CSI driver: checkpoints must be seen by all hosts. The command always carries `--resume true`, so a
restarted JobSet continues from the last complete checkpoint (and the first run starts fresh).
`--entry predict` runs predict.py on every host instead (`-- --model /gcs/... --input /gcs/... --output
/gcs/...`): the model, the input and the output on the bucket.

Restarts: exit status 75 (preempted: a checkpoint was written) and deaths by a signal restart the whole
slice, up to --max-restarts times; 2 (bad configuration) and 3 (a non-finite loss) fail at once, since a
retry would fail the same way. One slice: the fsdp mesh spans the chips of one slice (no multislice).
"""

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

PROJECT = Path(__file__).resolve().parent.parent
{%- if cookiecutter.variants == "notebook" %}
ENTRY = ["-m", {{ (cookiecutter.project_slug ~ ".cli") | tojson }}]
{%- else %}
ENTRY = ["train.py"]
{%- endif %}
# --entry predict: predict.py (kept in every variant), started on the hosts exactly as the training command is.
ENTRIES = {"train": ENTRY, "predict": ["predict.py"]}
PREEMPTED_EXIT = 75  # preemption.py: a checkpoint was written; `--resume` continues
NOT_RETRIED = (2, 3)  # cli.py: a bad configuration; loss_guard.py: a non-finite loss
# A container killed by signal N exits 128 + N: SIGKILL (137) at the end of the grace period, SIGTERM (143)
# before the preemption handler was installed. A node going away is not the run's fault: retried.
KILLED_BY_SIGNAL = range(129, 256)
CHIPS_PER_HOST = 4  # every multi-host TPU machine of these families: ct4p/ct5p/ct5lp-hightpu-4t, ct6e-standard-4t
REPLICATED_JOB = "slice"
CONTAINER = "train"
# xpk's gcsfuse Storage is a PersistentVolume, which must state a capacity; a bucket has none, so it is nominal.
NOMINAL_SIZE_GB = 1024
# implicit-dirs: folders written by another host (or gsutil) are seen without a placeholder object.
# rename-dir-limit: a checkpoint is committed by renaming its finished folder (checkpointing.py); gcsfuse refuses
# to rename a folder of a flat-namespace bucket unless it has fewer objects than this limit (then it copies each).
MOUNT_OPTIONS = "implicit-dirs,rename-dir-limit=100000"
DEFAULT_XPK_STORAGE = {{ (cookiecutter.project_slug.replace('_', '-') ~ "-outputs") | tojson }}


@dataclass(frozen=True)
class Family:
    accelerator: str  # GKE's node label cloud.google.com/gke-tpu-accelerator
    cores_per_chip: int  # the number in the type's name counts TensorCores: 2 per chip on v4 and v5p
    topologies: dict  # chips -> the default cloud.google.com/gke-tpu-topology


CUBES = {4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4", 128: "4x4x8", 256: "4x8x8", 512: "8x8x8"}
PLANES = {4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"}
FAMILIES = {
    "v4": Family("tpu-v4-podslice", 2, CUBES),
    "v5p": Family("tpu-v5p-slice", 2, CUBES),
    "v5litepod": Family("tpu-v5-lite-podslice", 1, {chips: t for chips, t in PLANES.items() if chips >= 8}),
    "v6e": Family("tpu-v6e-slice", 1, PLANES),
}
ALLOWED_TYPES = ", ".join(f"{name}-N" for name in FAMILIES)
# Kubernetes names; pod host names `<workload>-slice-<job>-<pod>` must stay within DNS's 63 characters.
NAME = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
BUCKET = re.compile(r"[a-z0-9][-a-z0-9_.]{1,220}[a-z0-9]")
# Training options this script sets itself: the layout, the shared output folder, resuming after a restart.
OWNED_OPTIONS = ("--output_dir", "--resume")


class BadInput(ValueError):
    """A flag with a value this script cannot launch with; the message names the flag."""


@dataclass(frozen=True)
class Slice:
    tpu_type: str
    family: str
    chips: int
    topology: str

    @property
    def hosts(self) -> int:
        return self.chips // CHIPS_PER_HOST

    @property
    def accelerator(self) -> str:
        return FAMILIES[self.family].accelerator

    @property
    def xpk_type(self) -> str:
        """xpk names a slice by family and size (v5p-32) or, for another shape, by topology (v5p-2x2x8)."""
        default = FAMILIES[self.family].topologies.get(self.chips)
        return self.tpu_type if self.topology == default else f"{self.family}-{self.topology}"


def tpu_slice(tpu_type: str, topology: str | None = None) -> Slice:
    match = re.fullmatch(r"(v4|v5p|v5litepod|v6e)-([1-9][0-9]*)", tpu_type or "")
    if not match:
        raise BadInput(f"--tpu-type {tpu_type}: unknown TPU type; use one of {ALLOWED_TYPES}")
    name, size = match.group(1), int(match.group(2))
    family = FAMILIES[name]
    chips, rest = divmod(size, family.cores_per_chip)
    sizes = ", ".join(str(known * family.cores_per_chip) for known in family.topologies)
    if rest or (topology is None and chips not in family.topologies):
        raise BadInput(f"--tpu-type {tpu_type}: no default topology for that size; {name} sizes: {sizes} (or --topology)")
    if topology is None:
        topology = family.topologies[chips]
    dimensions = len(next(iter(family.topologies.values())).split("x"))
    if not re.fullmatch("x".join([r"[1-9][0-9]*"] * dimensions), topology):
        raise BadInput(f"--topology {topology}: {name} topologies have {dimensions} dimensions, like "
                       f"{family.topologies[max(family.topologies)]}")
    product = 1
    for side in topology.split("x"):
        product *= int(side)
    if product != chips:
        raise BadInput(f"--topology {topology}: holds {product} chips, but {tpu_type} has {chips}")
    if chips % CHIPS_PER_HOST:
        raise BadInput(f"--tpu-type {tpu_type}: {chips} chips do not fill hosts of {CHIPS_PER_HOST}")
    return Slice(tpu_type, name, chips, topology)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad or missing flag is one line (`error: ...`), without the usage block above it."""

    def error(self, message):
        self.exit(2, f"error: {message}\n")


def parse(argv=None) -> argparse.Namespace:
    parser = OneLineParser(
        description=__doc__.split("\n\n")[0],
        epilog="Options after -- go to the training command (not --output_dir or --resume: this script sets them).",
    )
    parser.add_argument("--cluster", required=True, help="GKE cluster with a TPU node pool of this type")
    parser.add_argument("--workload", required=True, help="JobSet (and xpk workload) name: lowercase, digits, -")
    parser.add_argument("--tpu-type", required=True, help=f"Slice type: {ALLOWED_TYPES}, such as v5litepod-16")
    parser.add_argument("--topology", help="Chip topology (default: GKE's for the type, such as 4x4 or 2x2x4)")
    image = parser.add_mutually_exclusive_group(required=True)
    image.add_argument("--image", help="Container image with this project installed (pip install -e '.[tpu]' -c constraints.txt), "
                                       "its working directory the project folder")
    image.add_argument("--base-image", help="xpk only: xpk copies this folder onto this image (its --script-dir; "
                                            "a .dockerignore keeps .venv out) and the command installs it first")
    parser.add_argument("--bucket", required=True, help="Cloud Storage bucket for output_dir, shared by every host")
    parser.add_argument("--mount-point", default="/gcs", help="Where the bucket is mounted in the container")
    parser.add_argument("--service-account", default="default",
                        help="Kubernetes service account allowed to write the bucket (Workload Identity)")
    parser.add_argument("--xpk-storage", default=DEFAULT_XPK_STORAGE,
                        help="xpk Storage for the bucket (attached once per cluster with the printed command)")
    parser.add_argument("--max-restarts", type=int, default=5, help="Whole-slice restarts before the JobSet fails")
    parser.add_argument("--grace-seconds", type=int, default=120,
                        help="Seconds between SIGTERM and SIGKILL: the preemption checkpoint must be written in it")
    parser.add_argument("--project", help="Google Cloud project for xpk (default: gcloud's)")
    parser.add_argument("--zone", help="Zone for xpk (default: gcloud's)")
    parser.add_argument("--manifest", help="Where to write the JobSet manifest (default: outputs/gke/WORKLOAD.yaml)")
    parser.add_argument("--run", action="store_true", help="Run `xpk workload create` (xpk: $XPK or on PATH)")
    parser.add_argument("--entry", choices=list(ENTRIES), default="train",
                        help="What every host runs: train (train.py, the default) or predict (predict.py)")
    parser.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then options for the training (or predict) command")
    args = parser.parse_args(argv)
    if args.train_args[:1] == ["--"]:
        args.train_args = args.train_args[1:]
    return args


def check(args: argparse.Namespace) -> Slice:
    """The slice to launch on; BadInput naming the first flag that cannot work."""
    if not NAME.fullmatch(args.workload) or len(args.workload) > 40:
        raise BadInput(f"--workload {args.workload}: use at most 40 lowercase letters, digits and -, "
                       "starting with a letter")
    args.bucket = args.bucket.removeprefix("gs://").rstrip("/")
    if not BUCKET.fullmatch(args.bucket):
        raise BadInput(f"--bucket {args.bucket}: not a Cloud Storage bucket name")
    if not args.mount_point.startswith("/"):
        raise BadInput(f"--mount-point {args.mount_point}: must be an absolute path")
    if not NAME.fullmatch(args.xpk_storage):
        raise BadInput(f"--xpk-storage {args.xpk_storage}: use lowercase letters, digits and -")
    for flag, value, least in (("--max-restarts", args.max_restarts, 0), ("--grace-seconds", args.grace_seconds, 1)):
        if value < least:
            raise BadInput(f"{flag} {value}: must be a whole number, {least} or more")
    if args.manifest and not args.image:
        raise BadInput(f"--manifest {args.manifest}: needs --image (with --base-image the image is xpk's to build)")
    for index, arg in enumerate(args.train_args):
        name, _, value = arg.partition("=")
        if name in OWNED_OPTIONS and args.entry == "train":
            raise BadInput(f"{name}: set by launch_gke.py (the bucket, and --resume true); leave it out after --")
        given = value or " ".join(args.train_args[index + 1:index + 2])
        if name == "--parallelism" and given != "fsdp":
            raise BadInput("--parallelism: GKE runs one process per host, the fsdp layout; leave it out after --")
    return tpu_slice(args.tpu_type, args.topology)


def output_dir(args: argparse.Namespace) -> str:
    return f"{args.mount_point.rstrip('/')}/{args.workload}"


def train_command(args: argparse.Namespace) -> list[str]:
    """The command every host runs. --resume true: a restarted slice continues, a first run starts fresh.
    predict.py: its own options (--model, --input, --output: paths under the mount point), the fsdp layout."""
    if args.entry == "predict":
        return ["python3", *ENTRIES["predict"], *args.train_args, "--parallelism", "fsdp"]
    return ["python3", *ENTRY, *args.train_args, "--parallelism", "fsdp", "--output_dir", output_dir(args),
            "--resume", "true"]


def worker_hostnames(workload: str, hosts: int) -> str:
    # JobSet names each pod's host `<jobset>-<replicatedJob>-<job index>-<pod index>` in the subdomain `<jobset>`
    # (a headless service it creates when network.enableDNSHostnames is on); one slice: job index 0.
    return ",".join(f"{workload}-{REPLICATED_JOB}-0-{pod}.{workload}" for pod in range(hosts))


def manifest(args: argparse.Namespace, tpu: Slice) -> dict:
    """The JobSet: one Job of `hosts` pods, one per TPU host of the slice, each with all of its host's chips."""
    env = [
        {"name": "PJRT_DEVICE", "value": "TPU"},
        # GKE's webhook injects these two for an Indexed Job with a subdomain; set here so that the manifest says
        # what the runtime gets (libtpu joins the hosts with them): this pod's place, and every host in order.
        {"name": "TPU_WORKER_ID",
         "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
        {"name": "TPU_WORKER_HOSTNAMES", "value": worker_hostnames(args.workload, tpu.hosts)},
    ]
    container = {
        "name": CONTAINER,
        "image": args.image,
        "command": train_command(args),
        "env": env,
        "resources": {"limits": {"google.com/tpu": CHIPS_PER_HOST}},
        "volumeMounts": [
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "outputs", "mountPath": args.mount_point},
        ],
    }
    pod = {
        "metadata": {"annotations": {"gke-gcsfuse/volumes": "true"}},  # the GCS FUSE CSI driver's sidecar
        "spec": {
            "restartPolicy": "Never",  # a failed pod fails the Job; the JobSet decides about restarting
            # As GKE's TPU examples: the hosts talk over the node's network; DNS still resolves the pod names.
            "hostNetwork": True,
            "dnsPolicy": "ClusterFirstWithHostNet",
            "terminationGracePeriodSeconds": args.grace_seconds,
            "serviceAccountName": args.service_account,
            "nodeSelector": {
                "cloud.google.com/gke-tpu-accelerator": tpu.accelerator,
                "cloud.google.com/gke-tpu-topology": tpu.topology,
            },
            "tolerations": [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [container],
            "volumes": [
                {"name": "dshm", "emptyDir": {"medium": "Memory"}},
                {"name": "outputs", "csi": {
                    "driver": "gcsfuse.csi.storage.gke.io",
                    # hostNetworkPodKSA: Workload Identity does not serve host-network pods; with it the driver
                    # authenticates as the pod's service account itself (gcs-fuse-csi-driver's documented opt-in).
                    "volumeAttributes": {"bucketName": args.bucket, "mountOptions": MOUNT_OPTIONS,
                                         "hostNetworkPodKSA": "true"},
                }},
            ],
        },
    }
    job = {
        "completionMode": "Indexed",  # the completion index is TPU_WORKER_ID
        "parallelism": tpu.hosts,
        "completions": tpu.hosts,
        # One host cannot rejoin a slice whose others are mid-collective: any failed pod fails the Job at once,
        # and the JobSet restarts every host together (failurePolicy below).
        "backoffLimit": 0,
        "podFailurePolicy": {"rules": [{
            # Fail the Job with reason PodFailurePolicy, which the JobSet never restarts, unless the exit status
            # is worth a retry. A pod lost without an exit status (its node went away) matches no rule: the Job
            # fails with BackoffLimitExceeded, and that is restarted.
            "action": "FailJob",
            "onExitCodes": {"containerName": CONTAINER, "operator": "NotIn", "values": retried_exit_codes()},
        }]},
        "template": pod,
    }
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": args.workload,
            # All pods of a Job (the slice) on one node pool, one Job per node pool: a slice is one node pool.
            "annotations": {"alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"},
        },
        "spec": {
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "failurePolicy": {
                # Any other Job failure (BackoffLimitExceeded: exit 75, a signal, a lost node) takes JobSet's
                # default action, RestartJobSet: all Jobs recreated, counted against maxRestarts.
                "maxRestarts": args.max_restarts,
                "rules": [{"action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}],
            },
            "replicatedJobs": [{"name": REPLICATED_JOB, "replicas": 1, "template": {"spec": job}}],
        },
    }


def retried_exit_codes() -> list[int]:
    return [PREEMPTED_EXIT, *KILLED_BY_SIGNAL]


def xpk_storage_attach(args: argparse.Namespace) -> list[str]:
    """Once per cluster: the bucket as an xpk Storage mounted where the manifest mounts it."""
    return ["xpk", "storage", "attach", args.xpk_storage, "--type", "gcsfuse", "--bucket", args.bucket,
            "--cluster", args.cluster, "--mount-point", args.mount_point, "--readonly", "false",
            "--auto-mount", "false", "--size", str(NOMINAL_SIZE_GB), "--mount-options", MOUNT_OPTIONS, *location(args)]


def location(args: argparse.Namespace) -> list[str]:
    return [*(["--project", args.project] if args.project else []), *(["--zone", args.zone] if args.zone else [])]


def xpk_workload_create(args: argparse.Namespace, tpu: Slice) -> list[str]:
    """The same workload for xpk. xpk restarts on 42 and 127-255 by default; 75 is added, 2 and 3 are not in it."""
    command = shlex.join(train_command(args))
    if args.image:
        image = ["--docker-image", args.image]
    else:
        image = ["--base-docker-image", args.base_image, "--script-dir", str(PROJECT)]
        command = f"python3 -m pip install -e '.[tpu]' -c constraints.txt && {command}"
    return [
        "xpk", "workload", "create", "--cluster", args.cluster, "--workload", args.workload,
        "--tpu-type", tpu.xpk_type, "--num-slices", "1", *image, "--command", command,
        "--env", "PJRT_DEVICE=TPU", "--storage", args.xpk_storage,
        "--max-restarts", str(args.max_restarts), "--restart-on-exit-codes", str(PREEMPTED_EXIT),
        "--termination-grace-period-seconds", str(args.grace_seconds), *location(args),
    ]


def xpk_executable() -> str | None:
    return os.environ.get("XPK") or shutil.which("xpk")


def main(argv=None) -> int:
    args = parse(argv)
    try:
        tpu = check(args)
    except BadInput as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    xpk = xpk_executable() if args.run else None
    if args.run and xpk is None:
        print("error: --run: xpk is not on PATH; pip install xpk (in its own environment) or set XPK", file=sys.stderr)
        return 2
    print(f"# {args.tpu_type}: {tpu.hosts} host(s) of {CHIPS_PER_HOST} chips, topology {tpu.topology}, "
          f"one process per host (fsdp); output_dir {output_dir(args)} (gs://{args.bucket}/{args.workload})")
    if args.image:
        path = Path(args.manifest) if args.manifest else PROJECT / "outputs" / "gke" / f"{args.workload}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(manifest(args, tpu), sort_keys=False), encoding="utf-8")
        print(f"# JobSet manifest written: {path}\nkubectl apply -f {shlex.quote(str(path))}")
    else:
        print("# no JobSet manifest: with --base-image the image is xpk's to build")
    print("# or with xpk: the bucket as an xpk Storage (once per cluster), then the workload")
    print(shlex.join(xpk_storage_attach(args)))
    create = xpk_workload_create(args, tpu)
    print(shlex.join(create), flush=True)
    if not args.run:
        return 0
    return subprocess.run([xpk, *create[1:]], cwd=PROJECT).returncode


if __name__ == "__main__":
    sys.exit(main())
