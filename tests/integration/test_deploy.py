"""The deploy recipes: scripts pass bash -n and shellcheck, manifests parse and say what they must."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(
    [
        *ROOT.glob("deploy/**/*.sh"),
        *ROOT.glob("deploy/**/*.sbatch"),
        *ROOT.glob("scripts/*.sh"),
        ROOT / ".ci" / "run",
    ]
)


def _shellcheck() -> str | None:
    found = shutil.which("shellcheck") or str(Path(sys.executable).parent / "shellcheck")
    return found if Path(found).exists() else None


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_scripts_parse_and_pass_shellcheck(script):
    subprocess.run(["bash", "-n", str(script)], check=True)
    shellcheck = _shellcheck()
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (it comes with the test extra)")
    result = subprocess.run([shellcheck, "-S", "warning", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_daskcluster_manifest():
    doc = yaml.safe_load((ROOT / "deploy/kubernetes/daskcluster.yaml").read_text())
    assert doc["apiVersion"] == "kubernetes.dask.org/v1" and doc["kind"] == "DaskCluster"
    name = doc["metadata"]["name"]
    (worker,) = doc["spec"]["worker"]["spec"]["containers"]
    assert worker["args"][:3] == ["dask", "cuda", "worker"]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] >= 1
    mounts = {m["name"] for m in worker["volumeMounts"]}
    assert mounts <= {v["name"] for v in doc["spec"]["worker"]["spec"]["volumes"]}
    (scheduler,) = doc["spec"]["scheduler"]["spec"]["containers"]
    assert scheduler["args"] == ["dask", "scheduler"]
    ports = {p["name"]: p["containerPort"] for p in scheduler["ports"]}
    assert ports == {"tcp-comm": 8786, "http-dashboard": 8787}
    service = doc["spec"]["scheduler"]["service"]
    assert service["selector"] == {"dask.org/cluster-name": name, "dask.org/component": "scheduler"}
    assert {p["targetPort"] for p in service["ports"]} == set(ports)
    assert worker["image"] == scheduler["image"]


def test_gpu_workers_run_many_task_threads():
    # dask cuda worker starts one thread per GPU; one thread reads a seventh of what 16 do (H200)
    (worker,) = yaml.safe_load((ROOT / "deploy/kubernetes/daskcluster.yaml").read_text())["spec"]["worker"][
        "spec"
    ]["containers"]
    assert worker["args"][worker["args"].index("--nthreads") + 1] == "16"
    sbatch = (ROOT / "deploy/slurm/zarr-dask-gpu.sbatch").read_text()
    assert "THREADS_PER_GPU=${THREADS_PER_GPU:-16}" in sbatch and '--nthreads "$THREADS_PER_GPU"' in sbatch


def test_dockerfile_uses_cuda13_and_the_gpu_extra():
    text = (ROOT / "deploy/docker/Dockerfile").read_text()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines[0].startswith("FROM nvidia/cuda:13.")
    assert 'pip install ".[gpu,xarray]"' in text
    for path in ("pyproject.toml", "README.md", "zarr_dask_gpu"):
        assert path in text and (ROOT / path).exists()


def test_wheelhouse_script_reads_the_dependencies_from_pyproject():
    text = (ROOT / "deploy/wheelhouse/make_wheelhouse.sh").read_text()
    assert '["optional-dependencies"]["gpu"]' in text and "--only-binary=:all:" in text
