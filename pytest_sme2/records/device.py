"""What a device is and what it can prove (:class:`DeviceInfo`), and the two variants a case
runs in (:class:`Variant`): records every stage reads — the measurement holds them, the judge
keys time records by the machine class, the reports name the device — so they live below every
stage, not in a driver's file.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field


class Variant(enum.StrEnum):
    """The two ways a model runs: with SME2 kernels available to XNNPACK, and without."""

    ON = "sme2-on"
    OFF = "sme2-off"


@dataclass(frozen=True)
class DeviceInfo:
    """What a device is (fingerprint, machine class) and what it can prove.

    ``fingerprint`` is everything the device says about itself. ``machine_class`` is the part of it
    that changes performance — the CPU model, core count, the ISA features XNNPACK dispatches on,
    the chip or SoC, the torch and executorch versions — and decides which stored time record
    (latency, shares, speedup) a measurement is judged against. The rest (kernel patch release,
    hostname, Python patch version, runner build) are *notes*: recorded beside the times and shown
    when they change, never a reason to stop judging.

    ``variants`` are the variants it can run, SME2-on first. A device without SME2 runs only
    SME2-off; ``limits`` maps a gate family ("speedup", "sme2", "latency") to the reason the device
    cannot measure it, which becomes the skip reason.
    """

    name: str
    fingerprint: Mapping[str, str]
    has_sme2: bool
    variants: tuple[Variant, ...]
    time_meaningful: bool
    limits: Mapping[str, str] = field(default_factory=dict)
    machine_class: Mapping[str, str] = field(default_factory=dict)

    @property
    def notes(self) -> dict[str, str]:
        """The fingerprint less the machine class: context for a time record, not its identity."""
        return {k: v for k, v in self.fingerprint.items() if k not in self.machine_class}

    @property
    def class_id(self) -> str:
        """The machine class's name in baseline files: readable slug, then an exact hash."""
        return machine_class_id(self.machine_class)


#: Keys whose value names the hardware best, in order of preference, for a class id's slug.
_SLUG_KEYS = ("cpu", "chip", "model", "soc")


def machine_class_id(machine_class: Mapping[str, str]) -> str:
    """``amd-epyc-2c-1a2b3c4d``: the CPU (or chip, or phone model), the core count, and a hash of
    the whole class, so two classes that differ only in an ISA feature or a version never share a
    record while ``git diff baselines/`` still reads which machine a record belongs to."""
    name = next((machine_class[k] for k in _SLUG_KEYS if machine_class.get(k)), "machine")
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:32].strip("-")
    cores = f"-{machine_class['cores']}c" if machine_class.get("cores") else ""
    digest = hashlib.sha256(json.dumps(dict(machine_class), sort_keys=True).encode()).hexdigest()
    return f"{slug}{cores}-{digest[:8]}"


_UNSAFE_IN_FILE_NAMES = re.compile(r"[^A-Za-z0-9._=@-]+")


def device_file_name(name: str) -> str:
    """A device's name (``qemu-sme2:vl=32``) as a file or folder name: ``qemu-sme2@vl=32``, with
    anything but letters, digits and ``._=@-`` as ``_`` (a colon is not allowed in a Windows path,
    a slash of a value such as ``adb=/opt/adb`` would nest folders)."""
    return _UNSAFE_IN_FILE_NAMES.sub("_", name.replace(":", "@"))


def describe_class(machine_class: Mapping[str, str]) -> str:
    """One line naming a machine class for people: ``cpu: AMD EPYC, cores: 2, isa: avx2 fma``."""
    return ", ".join(f"{k}: {v}" for k, v in sorted(machine_class.items()))
