"""GKE: the JobSet manifest and the xpk command of scripts/launch_gke.py (no XLA, no cluster).

The manifest is read back as YAML and checked field by field, and its restart rules are evaluated as the Job
and JobSet APIs document them. The xpk command is given to xpk itself: its dry run (`XPK`, the path to an xpk
executable, or xpk on PATH; xpk pins its own dependencies, so it lives in an environment of its own) writes the
JobSet it would apply, which must ask for the same nodes, chips, command and restarts. A missing xpk skips those
tests, and fails them under REQUIRE_XPK=1. What only a real cluster shows: that the pods schedule, find each
other and the bucket, and that a preempted slice comes back.
"""

import json
import os
import re
import shlex
import shutil
import sys

import pytest
import yaml
from conftest import PROJECT, child_env, run

SCRIPT = PROJECT / "scripts" / "launch_gke.py"
ENTRY = ["train.py"] if (PROJECT / "train.py").exists() else ["-m", "{{ cookiecutter.project_slug }}.cli"]
WORKLOAD = "demo-run"
REQUIRED = ["--cluster", "tpu-cluster", "--workload", WORKLOAD, "--bucket", "my-bucket", "--project", "my-project",
            "--zone", "us-central2-b"]
# GKE's names and default topologies for these types (GKE's TPU planning tables), and hosts of 4 chips each.
SLICES = {
    "v4-16": ("tpu-v4-podslice", "2x2x2", 2),
    "v5p-32": ("tpu-v5p-slice", "2x2x4", 4),
    "v5litepod-16": ("tpu-v5-lite-podslice", "4x4", 4),
    "v6e-64": ("tpu-v6e-slice", "8x8", 16),
}
TOOLS_A_DRY_RUN_MUST_NOT_CALL = ("gcloud", "kubectl", "docker", "crane", "gsutil")


def launch(tmp_path, *args, env=None):
    """(process, the manifest as a dict or None) of one run of the script; the manifest goes to tmp_path."""
    path = tmp_path / "jobset.yaml"
    args = list(args)
    if "--image" in args:
        args.insert(args.index("--") if "--" in args else len(args), f"--manifest={path}")
    result = run([sys.executable, str(SCRIPT), *args], env=env or child_env(xla=False), timeout=120, check=False)
    return result, (yaml.safe_load(path.read_text()) if path.exists() else None)


def printed(result, *prefix: str) -> list[str]:
    """The printed command that starts with `prefix`, as argv."""
    (line,) = [line for line in result.stdout.splitlines() if line.startswith(" ".join(prefix) + " ")]
    return shlex.split(line)


def pod_spec(jobset: dict) -> dict:
    (replicated,) = jobset["spec"]["replicatedJobs"]
    return replicated["template"]["spec"]["template"]["spec"]


def outcome(jobset: dict, exit_code: int | None) -> str:
    """What happens when a pod of the slice ends with this exit status (None: its node went away, no status):
    "restart" (every host, with the same command) or "fail", by the rules as the Job API (podFailurePolicy: the
    first rule that matches acts; FailJob fails the Job with reason PodFailurePolicy; a pod no rule matches counts
    against backoffLimit, and past it the reason is BackoffLimitExceeded) and the JobSet API (failurePolicy: the
    first rule listing the reason acts, else RestartJobSet, while restarts are left) document them."""
    (replicated,) = jobset["spec"]["replicatedJobs"]
    job = replicated["template"]["spec"]
    (container,) = pod_spec(jobset)["containers"]
    reason = None
    for rule in job.get("podFailurePolicy", {}).get("rules", []):
        codes = rule.get("onExitCodes")
        if not codes or exit_code is None:
            continue  # onPodConditions rules: the manifests here have none that is not empty
        assert codes["containerName"] == container["name"]
        if (exit_code in codes["values"]) == (codes["operator"] == "In"):
            assert rule["action"] == "FailJob", rule
            reason = "PodFailurePolicy"
            break
    if reason is None:
        assert job["backoffLimit"] == 0  # otherwise the Job would retry the pod alone, which a slice cannot use
        reason = "BackoffLimitExceeded"
    policy = jobset["spec"]["failurePolicy"]
    actions = [rule["action"] for rule in policy.get("rules", []) if reason in rule.get("onJobFailureReasons", [reason])]
    action = (actions or ["RestartJobSet"])[0]
    return "restart" if action == "RestartJobSet" and policy.get("maxRestarts", 0) > 0 else "fail"


def project_config(command: list[str]):
    """The TrainConfig the project's own command line makes of the container's command."""
    from {{ cookiecutter.project_slug }}.cli import parse

    assert command[:1 + len(ENTRY)] == ["python3", *ENTRY]
    return parse(command[1 + len(ENTRY):])


# ---- the manifest -------------------------------------------------------------------------


@pytest.mark.parametrize("tpu_type", sorted(SLICES))
def test_the_manifest_asks_gke_for_the_slice(tmp_path, tpu_type):
    accelerator, topology, hosts = SLICES[tpu_type]
    result, jobset = launch(tmp_path, *REQUIRED, "--tpu-type", tpu_type, "--image", "gcr.io/p/train:1")
    assert result.returncode == 0, result.stderr
    (replicated,) = jobset["spec"]["replicatedJobs"]
    job = replicated["template"]["spec"]
    assert replicated["replicas"] == 1  # one slice
    assert job["completionMode"] == "Indexed"
    assert job["parallelism"] == job["completions"] == hosts
    pod = pod_spec(jobset)
    assert pod["nodeSelector"] == {"cloud.google.com/gke-tpu-accelerator": accelerator,
                                   "cloud.google.com/gke-tpu-topology": topology}
    (container,) = pod["containers"]
    assert container["resources"]["limits"] == {"google.com/tpu": 4}
    variables = {item["name"]: item for item in container["env"]}
    hostnames = variables["TPU_WORKER_HOSTNAMES"]["value"].split(",")
    assert hostnames == [f"{WORKLOAD}-slice-0-{index}.{WORKLOAD}" for index in range(hosts)]


def test_the_manifest_carries_what_a_multi_host_tpu_job_needs(tmp_path):
    result, jobset = launch(tmp_path, *REQUIRED, "--tpu-type", "v5litepod-16", "--image", "gcr.io/p/train:1",
                            "--max-restarts", "7", "--", "--num_epochs", "2")
    assert result.returncode == 0, result.stderr
    assert (jobset["apiVersion"], jobset["kind"], jobset["metadata"]["name"]) == (
        "jobset.x-k8s.io/v1alpha2", "JobSet", WORKLOAD)
    # The pod host names in TPU_WORKER_HOSTNAMES exist only with JobSet's DNS host names.
    assert jobset["spec"]["network"]["enableDNSHostnames"] is True
    (replicated,) = jobset["spec"]["replicatedJobs"]
    assert replicated["name"] == "slice"
    pod = pod_spec(jobset)
    assert pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"  # host network, and still the cluster's DNS
    assert pod["restartPolicy"] == "Never"
    (container,) = pod["containers"]
    assert container["image"] == "gcr.io/p/train:1"
    variables = {item["name"]: item for item in container["env"]}
    assert variables["PJRT_DEVICE"]["value"] == "TPU"
    assert variables["TPU_WORKER_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == (
        "metadata.annotations['batch.kubernetes.io/job-completion-index']")
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
    assert volumes[mounts["/dev/shm"]]["emptyDir"] == {"medium": "Memory"}
    bucket = volumes[mounts["/gcs"]]["csi"]
    assert bucket["driver"] == "gcsfuse.csi.storage.gke.io"
    assert bucket["volumeAttributes"]["bucketName"] == "my-bucket"
    assert bucket["volumeAttributes"]["hostNetworkPodKSA"] == "true"  # the service account's access, host network
    # A checkpoint is committed by renaming its folder, which gcsfuse refuses on a flat bucket without a limit.
    assert "rename-dir-limit=100000" in bucket["volumeAttributes"]["mountOptions"].split(",")
    assert jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["annotations"][
        "gke-gcsfuse/volumes"] == "true"  # the CSI driver mounts only into pods that say so
    assert jobset["spec"]["failurePolicy"]["maxRestarts"] == 7
    config = project_config(container["command"])
    assert (config.resume, config.parallelism, config.output_dir, config.num_epochs) == (True, "fsdp", "/gcs/demo-run", 2)


@pytest.mark.parametrize(("exit_code", "expected"), [
    (75, "restart"),  # preempted: a checkpoint was written, --resume continues from it
    (137, "restart"),  # SIGKILL: the grace period ran out, or the node went away
    (143, "restart"),  # SIGTERM before the preemption handler was installed
    (None, "restart"),  # the pod was lost with its node, no exit status
    (2, "fail"),  # a bad configuration: a retry fails the same way
    (3, "fail"),  # a non-finite loss: the same data and weights give it again
    (1, "fail"),  # an unexpected error: read its traceback before spending the slice again
])
def test_the_restart_rules(tmp_path, exit_code, expected):
    result, jobset = launch(tmp_path, *REQUIRED, "--tpu-type", "v5p-32", "--image", "gcr.io/p/train:1")
    assert result.returncode == 0, result.stderr
    assert outcome(jobset, exit_code) == expected
    (container,) = pod_spec(jobset)["containers"]
    assert container["command"][-2:] == ["--resume", "true"]  # what a restarted pod runs: it continues


def test_no_restarts_when_asked_for_none(tmp_path):
    result, jobset = launch(tmp_path, *REQUIRED, "--tpu-type", "v5p-32", "--image", "i", "--max-restarts", "0")
    assert result.returncode == 0, result.stderr
    assert outcome(jobset, 75) == "fail"


def test_a_topology_overrides_the_default(tmp_path):
    result, jobset = launch(tmp_path, *REQUIRED, "--tpu-type", "v5p-384", "--topology", "4x4x12", "--image", "i")
    assert result.returncode == 0, result.stderr
    assert pod_spec(jobset)["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "4x4x12"
    assert jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] == 48
    create = printed(result, "xpk", "workload", "create")
    assert create[create.index("--tpu-type") + 1] == "v5p-4x4x12"  # xpk's name for a shape other than the default


def test_the_documented_command_runs(tmp_path):
    text = (PROJECT / "docs" / "launchers.md").read_text(encoding="utf-8")
    lines = [line for line in text.replace("\\\n", " ").splitlines() if line.startswith("python scripts/launch_gke.py")]
    assert lines
    for line in lines:
        argv = shlex.split(line, comments=True)
        result, _ = launch(tmp_path, *argv[2:])
        assert result.returncode == 0, f"{line}\n{result.stderr}"


# ---- bad input -----------------------------------------------------------------------------

GOOD = {"--tpu-type": "v5litepod-16", "--image": "gcr.io/p/train:1"}
BAD = [
    ({"--tpu-type": "v3-8"}, "--tpu-type v3-8: unknown TPU type; use one of v4-N, v5p-N, v5litepod-N, v6e-N"),
    ({"--tpu-type": "v5litepod-12"}, "--tpu-type v5litepod-12: no default topology"),
    ({"--topology": "4x4x1"}, "--topology 4x4x1: v5litepod topologies have 2 dimensions"),
    ({"--topology": "2x4"}, "--topology 2x4: holds 8 chips, but v5litepod-16 has 16"),
    ({"--workload": "Demo_Run"}, "--workload Demo_Run:"),
    ({"--bucket": "gs://No Such"}, "--bucket No Such:"),
    ({"--max-restarts": "-1"}, "--max-restarts -1:"),
    ({"--mount-point": "gcs"}, "--mount-point gcs:"),
]


@pytest.mark.parametrize(("flags", "message"), BAD, ids=[next(iter(flags)) + "=" + next(iter(flags.values()))
                                                          for flags, _ in BAD])
def test_bad_flags_stop_with_one_line_naming_the_flag(tmp_path, flags, message):
    values = dict(zip(REQUIRED[::2], REQUIRED[1::2], strict=True)) | GOOD | flags
    result, jobset = launch(tmp_path, *[item for pair in values.items() for item in pair])
    assert result.returncode == 2
    assert result.stderr.splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith(f"error: {message}"), result.stderr
    assert jobset is None and result.stdout == ""  # nothing half-made


@pytest.mark.parametrize(("args", "message"), [
    (["--workload", WORKLOAD, "--tpu-type", "v6e-16", "--image", "i", "--bucket", "my-bucket"],
     "error: the following arguments are required: --cluster"),
    ([*REQUIRED, "--tpu-type", "v6e-16", "--image", "i", "--max-restarts", "many"],
     "error: argument --max-restarts: invalid int value: 'many'"),
    ([*REQUIRED, "--tpu-type", "v6e-16"], "error: one of the arguments --image --base-image is required"),
])
def test_missing_or_malformed_flags_are_one_line_too(tmp_path, args, message):
    result, jobset = launch(tmp_path, *args)
    assert result.returncode == 2
    assert result.stderr == message + "\n"
    assert jobset is None


def test_entry_predict_runs_predict_py_on_every_host_with_its_own_options(tmp_path):
    flags = ["--model", "/gcs/run/model", "--input", "/gcs/in.csv", "--output", "/gcs/out.csv"]
    result, jobset = launch(tmp_path, *REQUIRED, "--tpu-type", "v6e-16", "--image", "i", "--entry", "predict", "--", *flags)
    assert result.returncode == 0, result.stderr
    (container,) = pod_spec(jobset)["containers"]
    assert container["command"] == ["python3", "predict.py", *flags, "--parallelism", "fsdp"]
    create = printed(result, "xpk", "workload", "create")
    assert create[create.index("--command") + 1] == shlex.join(container["command"])


@pytest.mark.parametrize(("train_args", "flag"), [
    (["--output_dir", "here"], "--output_dir"),
    (["--resume=false"], "--resume"),
    (["--parallelism", "data"], "--parallelism"),
])
def test_training_options_the_script_owns_are_refused(tmp_path, train_args, flag):
    result, jobset = launch(tmp_path, *REQUIRED, "--tpu-type", "v6e-16", "--image", "i", "--", *train_args)
    assert result.returncode == 2
    assert re.fullmatch(rf"error: {flag}: .*\n", result.stderr), result.stderr
    assert jobset is None


def test_a_manifest_needs_an_image(tmp_path):
    command = [sys.executable, str(SCRIPT), *REQUIRED, "--tpu-type", "v6e-16", "--base-image", "python:3.11",
               "--manifest", str(tmp_path / "jobset.yaml")]
    result = run(command, env=child_env(xla=False), check=False)
    assert result.returncode == 2
    assert result.stderr.startswith("error: --manifest ") and len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "jobset.yaml").exists()


def test_run_without_xpk_says_so(tmp_path):
    env = {key: value for key, value in child_env(xla=False).items() if key != "XPK"}
    env["PATH"] = str(tmp_path)  # no xpk there
    result, jobset = launch(tmp_path, *REQUIRED, "--tpu-type", "v6e-16", "--image", "i", "--run", env=env)
    assert result.returncode == 2
    assert result.stderr.startswith("error: --run: xpk is not on PATH") and len(result.stderr.splitlines()) == 1
    assert jobset is None


def test_run_runs_the_printed_xpk_command(tmp_path):
    record = tmp_path / "argv.json"
    fake = tmp_path / "xpk"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\njson.dump(sys.argv[1:], open({str(record)!r}, 'w'))\n")
    fake.chmod(0o755)
    result, _ = launch(tmp_path, *REQUIRED, "--tpu-type", "v6e-16", "--image", "i", "--run",
                       env=child_env(xla=False, XPK=str(fake)))
    assert result.returncode == 0, result.stderr
    assert json.loads(record.read_text()) == printed(result, "xpk", "workload", "create")[1:]


# ---- xpk's own dry run ---------------------------------------------------------------------


@pytest.fixture
def xpk():
    found = os.environ.get("XPK") or shutil.which("xpk")
    if found:
        return found
    if os.environ.get("REQUIRE_XPK") == "1":
        pytest.fail("xpk is not found (set XPK to its path, or put it on PATH) but REQUIRE_XPK=1")
    pytest.skip("xpk is not installed (pip install xpk in its own environment, then XPK=path/to/xpk)")


def offline(tmp_path) -> tuple[dict, object]:
    """An environment for xpk in which gcloud, kubectl and the image tools are stubs that record any call."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    calls = tmp_path / "calls"
    for tool in TOOLS_A_DRY_RUN_MUST_NOT_CALL:
        (stubs / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> {shlex.quote(str(calls))}\nexit 1\n')
        (stubs / tool).chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    # TELEMETRY_ENABLED=false: xpk's feature flag for its usage reports (sent to Google otherwise).
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "HOME": str(home), "TELEMETRY_ENABLED": "false", "LANG": "C.UTF-8"}
    return env, calls


@pytest.mark.parametrize("case", [
    ["--tpu-type", "v5litepod-16", "--image", "gcr.io/p/train:1"],
    ["--tpu-type", "v4-16", "--image", "gcr.io/p/train:1", "--max-restarts", "2"],
    ["--tpu-type", "v6e-64", "--image", "gcr.io/p/train:1", "--", "--num_epochs", "2"],
    ["--tpu-type", "v5p-384", "--topology", "4x4x12", "--base-image", "python:3.11"],
], ids=["v5litepod-16", "v4-16", "v6e-64", "v5p-4x4x12-base-image"])
def test_xpk_dry_run_writes_the_same_workload(tmp_path, xpk, case):
    result, ours = launch(tmp_path, *REQUIRED, *case)
    assert result.returncode == 0, result.stderr
    create = printed(result, "xpk", "workload", "create")
    theirs_path = tmp_path / "xpk-jobset.yaml"
    env, calls = offline(tmp_path)
    dry = run([xpk, *create[1:], "--dry-run", "--output-manifest-file", str(theirs_path)], env=env, timeout=300,
              check=False)
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    assert not calls.exists(), calls.read_text()  # the dry run only printed what it would run
    theirs = yaml.safe_load(theirs_path.read_text())
    if ours is None:  # --base-image: no manifest of ours; what the script derived stands in
        assert "--base-image" in case
        (container,) = pod_spec(theirs)["containers"]
        assert pod_spec(theirs)["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "4x4x12"
        assert theirs["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] == 48
        assert container["resources"]["limits"]["google.com/tpu"] == 4
    else:
        assert pod_spec(theirs)["nodeSelector"] == pod_spec(ours)["nodeSelector"]
        ours_job, theirs_job = (jobset["spec"]["replicatedJobs"][0]["template"]["spec"] for jobset in (ours, theirs))
        assert theirs_job["parallelism"] == ours_job["parallelism"]
        assert theirs_job["completions"] == ours_job["completions"]
        limits = [pod_spec(jobset)["containers"][0]["resources"]["limits"]["google.com/tpu"] for jobset in (ours, theirs)]
        assert limits[0] == limits[1]
        assert pod_spec(theirs)["terminationGracePeriodSeconds"] == pod_spec(ours)["terminationGracePeriodSeconds"]
        assert theirs["spec"]["failurePolicy"]["maxRestarts"] == ours["spec"]["failurePolicy"]["maxRestarts"]
        for code in (1, 2, 3, 75, 137, 143, None):
            assert outcome(theirs, code) == outcome(ours, code), code
    (container,) = pod_spec(theirs)["containers"]
    script = container["command"][-1]  # xpk wraps the command in a shell script that keeps its exit status
    assert create[create.index("--command") + 1] in script
    assert {"name": "PJRT_DEVICE", "value": "TPU"} in container["env"]
    assert pod_spec(theirs)["hostNetwork"] is True


def test_xpk_parses_the_storage_attach_command(tmp_path, xpk):
    """`xpk storage attach` reads the cluster even in a dry run, so its own argument parser checks this one."""
    result, _ = launch(tmp_path, *REQUIRED, "--tpu-type", "v5litepod-16", "--image", "i", "--mount-point", "/data")
    attach = printed(result, "xpk", "storage", "attach")
    python = open(xpk).readline().removeprefix("#!").strip()  # the interpreter of xpk's own environment
    code = ("import argparse, json, sys\nfrom xpk.parser.core import set_parser\n"
            "parser = argparse.ArgumentParser(prog='xpk')\nset_parser(parser=parser)\n"
            "args = vars(parser.parse_args(sys.argv[1:]))\n"
            "print(json.dumps({k: v for k, v in args.items() if isinstance(v, (str, int, bool, type(None)))}))")
    env, _ = offline(tmp_path)
    parsed = run([python, "-c", code, *attach[1:]], env=env, timeout=120)
    args = json.loads(parsed.stdout.splitlines()[-1])
    assert (args["name"], args["type"], args["bucket"], args["mount_point"]) == (
        "{{ cookiecutter.project_slug.replace('_', '-') }}-outputs", "gcsfuse", "my-bucket", "/data")
    assert (args["readonly"], args["auto_mount"], args["cluster"]) == (False, False, "tpu-cluster")
    assert args["size"] > 0  # xpk asks for one for a gcsfuse volume
    assert "rename-dir-limit=100000" in args["mount_options"].split(",")  # as in the manifest
