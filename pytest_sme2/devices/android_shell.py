"""What an ``android`` device's shell is asked and answers: the facts command (``getprop`` and
``/proc/cpuinfo``) and its parse, the ``adb shell`` command line that runs the runner, and the
taskset mask it may be pinned with.

Apart from :mod:`pytest_sme2.devices.android` because none of it needs a device: strings in,
strings out, tested without a phone.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from pytest_sme2.errors import ConfigError

# getprop keys for the fingerprint, and what they are called there
PROPERTIES = {
    "ro.product.model": "model",
    "ro.soc.model": "soc",
    "ro.soc.manufacturer": "soc_manufacturer",
    "ro.build.version.release": "android",
    "ro.product.cpu.abi": "abi",
}
#: The properties that make a phone's machine class (the Android version and ABI are notes).
CLASS_PROPERTIES = frozenset({"model", "soc", "soc_manufacturer"})
FACTS_COMMAND = (
    "for p in "
    + " ".join(PROPERTIES)
    + '; do echo "$p=$(getprop $p)"; done; echo "--- cpuinfo"; cat /proc/cpuinfo'
)


@dataclass(frozen=True)
class DeviceFacts:
    """What ``getprop`` and ``/proc/cpuinfo`` say about a device."""

    properties: Mapping[str, str]  # fingerprint names (model, soc, android, abi) -> value
    features: frozenset[str]  # CPU features every core reports
    cores: int

    @property
    def has_sme2(self) -> bool:
        return "sme2" in self.features


def parse_device_facts(text: str) -> DeviceFacts:
    """Parse the output of :data:`FACTS_COMMAND`: ``key=value`` lines, then /proc/cpuinfo.

    Features are those *every* core reports (big.LITTLE phones may differ per cluster).
    """
    head, _, cpuinfo = text.partition("--- cpuinfo")
    properties = {}
    for line in head.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key in PROPERTIES and value.strip():
            properties[PROPERTIES[key]] = value.strip()
    cores = 0
    features: set[str] | None = None
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "processor":
            cores += 1
        elif key.strip() == "Features":
            words = set(value.split())
            features = words if features is None else features & words
    return DeviceFacts(properties, frozenset(features or ()), cores)


def shell_command(
    directory: PurePosixPath,
    argv: Sequence[str],
    *,
    preload: PurePosixPath | None = None,
    cpu_mask: str | None = None,
    pid_file: PurePosixPath | None = None,
) -> str:
    """The ``adb shell`` command line that runs ``argv`` from ``directory``.

    ``cd DIR && export LD_LIBRARY_PATH=DIR [LD_PRELOAD=SHIM] && echo $$ > PID_FILE && exec
    [taskset MASK] ARGV...``: the runner's libraries are beside it, the shim (SME2-off) is
    preloaded, the mask pins the cores. ``exec`` makes the shell's pid, written to ``pid_file``,
    the runner's own: killing the local ``adb`` does not end a process on the phone, so a runner
    that hangs is killed by that pid (:meth:`AndroidDevice.run`).
    """
    env = [f"LD_LIBRARY_PATH={shlex.quote(str(directory))}"]
    if preload is not None:
        env.append(f"LD_PRELOAD={shlex.quote(str(preload))}")
    steps = [f"cd {shlex.quote(str(directory))}", f"export {' '.join(env)}"]
    if pid_file is not None:
        steps.append(f"echo $$ > {shlex.quote(str(pid_file))}")
    pin = ["taskset", shlex.quote(cpu_mask)] if cpu_mask else []
    steps.append(" ".join(["exec", *pin, *(shlex.quote(arg) for arg in argv)]))
    return " && ".join(steps)


def check_cpu_mask(mask: str) -> str:
    """A taskset mask as taskset takes it (hex, e.g. ``f0``, ``0x80``); ConfigError otherwise."""
    if not re.fullmatch(r"(0x)?[0-9a-fA-F]+", mask) or int(mask, 16) == 0:
        raise ConfigError(
            f"--sme2-cpu-mask={mask!r}: expected a non-zero hex CPU mask such as f0 or 0x80"
        )
    return mask
