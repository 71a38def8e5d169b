"""The root qemu-sme2's guest sees (``qemu-aarch64 -L``): the cross toolchain's aarch64 libraries,
and one fixed CPU in ``/sys``, whatever machine runs the emulation.

Why: under ``-L``, a guest path that exists under the root is read there, and every other one
from the host. The guest's CPU library (cpuinfo, in the runtime's thread pool and in XNNPACK)
reads the host's ``/sys/devices/system/cpu``: how many CPUs are possible, present and online,
``kernel_max``, each CPU's topology and frequencies. It sizes its tables by them, and those
allocations move everything later on the runner's heap, so the instructions libc's allocator and
copies execute inside method init and the inference move with the host: a view of 8 CPUs instead
of 2 moved toy_cnn fp32's init by 835 instructions and its inference by 19. A fixed view makes an
instruction count a property of the program and the wheel alone, as a baseline needs.

The view is one CPU (cpu0), which every host has, so qemu's own ``/proc/cpuinfo`` (one entry per
host CPU) always agrees with it; the runner sets its thread count itself.
"""

from __future__ import annotations

from pathlib import Path

from pytest_sme2.cache import cache_root, cached_dir, content_key

#: What the guest reads of ``/sys`` instead of the host's (paths relative to the root). The MIDR
#: carries the fields qemu's ``/proc/cpuinfo`` shows for ``-cpu max`` (implementer 0x00, part
#: 0x051): an x86 host has no such file, an arm64 host's would name its own CPU.
CPU_VIEW: dict[str, str] = {
    "sys/devices/system/cpu/kernel_max": "0\n",
    "sys/devices/system/cpu/possible": "0\n",
    "sys/devices/system/cpu/present": "0\n",
    "sys/devices/system/cpu/online": "0\n",
    "sys/devices/system/cpu/cpu0/regs/identification/midr_el1": "0x00000000000f0510\n",
    "sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq": "2000000\n",
    "sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_min_freq": "2000000\n",
    **{
        f"sys/devices/system/cpu/cpu0/topology/{name}": "0\n"
        for name in (
            "physical_package_id",
            "core_id",
            "cluster_id",
            "cluster_cpus_list",
            "core_siblings_list",
            "core_cpus_list",
            "package_cpus_list",
            "thread_siblings_list",
        )
    },
}


def guest_root(libraries: Path) -> Path:
    """The cached root over ``libraries`` (the cross toolchain's target directory: its entries
    are linked in) with :data:`CPU_VIEW` written in; built once per content."""
    key = content_key(str(libraries), *(f"{path}={text}" for path, text in CPU_VIEW.items()))
    return cached_dir(
        cache_root() / "qemu-sme2" / f"guest-root-{key}", lambda tmp: _fill(tmp, libraries)
    )


def _fill(root: Path, libraries: Path) -> None:
    for entry in sorted(libraries.iterdir()):
        (root / entry.name).symlink_to(entry)
    for relative, text in CPU_VIEW.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
