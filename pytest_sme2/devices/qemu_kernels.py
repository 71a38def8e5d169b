"""qemu-sme2's ExecuTorch LLM custom kernels: the aarch64 wheel's ``libcustom_ops_aot_lib.so`` and
the aarch64 torch libraries it needs, fetched from PyPI by pip on first use.

Why these: the kernels ExecuTorch ships for aarch64 are in that library
(:mod:`pytest_sme2.runner.kernel_libraries`), which needs the aarch64 ``libtorch_cpu.so`` and
``libc10.so``. PyPI's aarch64 torch of the installed version is a CUDA build: its
``libtorch_cpu.so`` also names the CUDA runtime and profiler libraries (``libcudart.so.13``,
``libcupti.so.13``), which torch's own requirement (``cuda-toolkit[…]==13.0.3``) takes from
``nvidia-cuda-runtime`` and ``nvidia-cuda-cupti``: loaded, never called (the kernels run on the
CPU). Only what ``libtorch_cpu.so`` and ``libc10.so`` need is kept (about 290 MB of a 430 MB
wheel), laid out as in site-packages, so torch's own RPATH (``$ORIGIN/../../nvidia/cu13/lib``)
finds the CUDA ones. Fetched only when a program calls ``llama::`` operators; the stored counts
key these files (:meth:`pytest_sme2.devices.qemu.QemuSme2Device._count_key`).
"""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

from pytest_sme2.cache import cache_root, cached_dir, content_key
from pytest_sme2.devices.provision import pip_download
from pytest_sme2.errors import RunnerError
from pytest_sme2.runner.kernel_libraries import CustomKernels, needed_libraries

#: Wheel platforms pip may take: torch's, and the older manylinux tags the nvidia wheels carry.
PLATFORMS = (
    "manylinux_2_28_aarch64",
    "manylinux_2_25_aarch64",
    "manylinux_2_17_aarch64",
    "manylinux2014_aarch64",
)
#: The torch libraries the custom kernels link (the rest of torch/lib is kept only if needed).
_ROOTS = ("libtorch_cpu.so", "libc10.so")
#: The extras of torch's cuda-toolkit requirement that hold what ``libtorch_cpu.so`` names.
_CUDA_EXTRAS = "cudart,cupti"
_CUDA_REQUIREMENT = re.compile(r"^Requires-Dist: cuda-toolkit\[[^\]]*\]==([0-9.]+)", re.M)


def aarch64_custom_kernels(
    executorch_dir: Path, log: Callable[[str], None] = print
) -> CustomKernels:
    """The custom kernels of the unpacked aarch64 executorch wheel at ``executorch_dir``, with
    the aarch64 torch libraries of the installed torch version (downloaded once)."""
    try:
        version = importlib.metadata.version("torch").split("+")[0]  # 2.13.0+cpu: PyPI's 2.13.0
    except importlib.metadata.PackageNotFoundError:
        raise RunnerError(
            "torch is not installed (its version picks the aarch64 torch libraries that "
            'ExecuTorch\'s LLM custom kernels need): pip install "pytest-sme2[export]"'
        ) from None
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    key = content_key(version, python, *PLATFORMS, _CUDA_EXTRAS, *_ROOTS)
    entry = cached_dir(
        cache_root() / "qemu-sme2" / f"torch-{version}-aarch64-{key}",
        lambda out: _fetch(out, version, python, log),
    )
    return CustomKernels("aarch64", executorch_dir, entry / "site/torch/lib")


def _fetch(out: Path, version: str, python: str, log: Callable[[str], None]) -> None:
    wheels, site = out / "wheels", out / "site"
    log(f"qemu-sme2: downloading the aarch64 torch {version} wheel for ExecuTorch's LLM kernels")
    pip_download(wheels, f"torch=={version}", PLATFORMS, python)
    (wheel,) = wheels.glob("torch-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        outside = _extract_needed(archive, site)
        metadata = archive.read(f"torch-{version}.dist-info/METADATA").decode(errors="replace")
    cuda = _CUDA_REQUIREMENT.search(metadata)
    if cuda is not None:  # a CUDA build: the runtime libraries libtorch_cpu.so names
        requirement = f"cuda-toolkit[{_CUDA_EXTRAS}]=={cuda.group(1)}"
        pip_download(wheels / "cuda", requirement, PLATFORMS, python, deps=True)
        for nvidia in sorted((wheels / "cuda").glob("nvidia_*.whl")):
            with zipfile.ZipFile(nvidia) as archive:
                names = [n for n in archive.namelist() if Path(n).name in outside]
                archive.extractall(site, names)
    shutil.rmtree(wheels)


def _extract_needed(archive: zipfile.ZipFile, site: Path) -> set[str]:
    """Extract :data:`_ROOTS` from the torch wheel and, transitively, every library of its
    ``torch/lib`` they need; nothing else (``libtorch_cuda.so`` alone is 420 MB). Returns the
    needed names the wheel does not hold (the guest's libc …, the CUDA runtime's)."""
    members = {
        Path(name).name: name
        for name in archive.namelist()
        if name.startswith("torch/lib/") and ".so" in Path(name).name
    }
    missing = [name for name in _ROOTS if name not in members]
    if missing:
        raise RunnerError(f"{archive.filename}: no torch/lib/{missing[0]}; cannot load the kernels")
    wanted, kept, outside = list(_ROOTS), set(), set()
    while wanted:
        name = wanted.pop()
        if name in kept or name in outside:
            continue
        if name not in members:
            outside.add(name)
            continue
        kept.add(name)
        archive.extract(members[name], site)
        wanted += needed_libraries(site / members[name])
    return outside
