"""Time provisioning of the qemu-sme2 device: cold (fresh cache), warm, and the first runner build.

Cold runs in a fresh temporary ``SME2_CACHE_DIR``: it fetches qemu-user from trixie-backports and
the aarch64 executorch wheel, and builds the shim. The apt cross toolchain is per machine, not per
cache, so whether it was already installed is printed; ``--reinstall-apt`` (root) purges the
cross packages first so that the cold figure includes installing them, as on a fresh CI machine.

    python benchmarks/provision_time.py [--reinstall-apt]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pytest_sme2.devices.provision import CROSS_PACKAGES, provision_qemu
from pytest_sme2.runner.build import build_runner

# What installing CROSS_PACKAGES brings in: removed by --reinstall-apt, nothing else.
_CROSS_PATTERNS = ("*-aarch64-linux-gnu", "*-arm64-cross")


def _installed_cross_packages() -> list[str]:
    result = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package} ${db:Status-Status}\n", *_CROSS_PATTERNS],
        capture_output=True,
        text=True,
    )
    return [line.split()[0] for line in result.stdout.splitlines() if line.endswith(" installed")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--reinstall-apt",
        action="store_true",
        help="purge the aarch64 cross packages first, so the cold time includes apt (root)",
    )
    args = parser.parse_args()
    if args.reinstall_apt:
        packages = _installed_cross_packages()
        if packages:
            subprocess.run(["apt-get", "purge", "-y", "-q", *packages], check=True)
    apt_state = (
        "already installed"
        if all(package in _installed_cross_packages() for package in CROSS_PACKAGES)
        else "installed by this run"
    )
    with tempfile.TemporaryDirectory(prefix="sme2-provision-") as cache:
        os.environ["SME2_CACHE_DIR"] = cache
        steps: list[str] = []
        start = time.perf_counter()
        toolchain = provision_qemu(log=steps.append)
        cold = time.perf_counter() - start
        start = time.perf_counter()
        provision_qemu(log=steps.append)
        warm = time.perf_counter() - start
        start = time.perf_counter()
        build_runner(target="aarch64", executorch_dir=toolchain.executorch_dir)
        build = time.perf_counter() - start
        size = sum(f.stat().st_size for f in Path(cache).rglob("*") if f.is_file()) / 1e6
    print(f"qemu-aarch64 {toolchain.qemu_version}, cross toolchain {apt_state}")
    for step in steps:
        print(f"  {step}")
    print(f"cold provisioning : {cold:7.2f} s  (cache {size:.0f} MB incl. runner)")
    print(f"warm provisioning : {warm:7.3f} s")
    print(f"aarch64 runner build (first): {build:.2f} s")


if __name__ == "__main__":
    main()
