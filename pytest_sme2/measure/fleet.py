"""The session's devices: each built from its spec and prepared once, on its first case (then told
what the machine-info hooks add); a device that is lost stays lost, so its remaining cases fail
at once while the others go on.

Session state, hence a plain class rather than a frozen dataclass.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pytest_sme2.devices.base import Device, MachineInfo, OptionGetter
from pytest_sme2.devices.spec import DeviceSpec
from pytest_sme2.errors import ConfigError, DeviceLost
from pytest_sme2.measure.settle import MachineSpeed


class Fleet:
    """Prepared devices, the devices lost, and each device's undisturbed speed, by spec."""

    def __init__(self, flags: OptionGetter, machine_info: MachineInfo | None = None) -> None:
        """``flags`` are the option values each device is built from (a spec's keys win);
        ``machine_info`` adds to each device's info once it is prepared (the session's
        ``pytest_sme2_update_machine_info`` hook)."""
        self._flags = flags
        self._machine_info = machine_info
        self._devices: dict[DeviceSpec, Device] = {}
        self._lost: dict[DeviceSpec, str] = {}
        self._speeds: dict[DeviceSpec, MachineSpeed] = {}

    def device(self, spec: DeviceSpec) -> Device:
        """The prepared device of ``spec``. Raises DeviceLost once it is lost, and the error of
        its preparation (a phone not attached, a Mac that is not one) for each of its cases; a
        bad option value is a ConfigError that starts with the spec."""
        if spec in self._lost:
            raise DeviceLost(f"{spec.id} was lost earlier in this session: {self._lost[spec]}")
        if spec not in self._devices:
            try:
                device = spec.kind.from_options(spec.getter(self._flags))
            except ConfigError as err:  # a spec's value, or the flag it defaults to: name both
                raise ConfigError(f"{spec.id}: {err}") from None
            device.spec_id = spec.id
            with self.using(spec):
                device.prepare()
                if self._machine_info is not None:
                    device.add_machine_info(self._machine_info)
            self._devices[spec] = device
        return self._devices[spec]

    @contextmanager
    def using(self, spec: DeviceSpec) -> Iterator[None]:
        """Run the block on ``spec``'s device; a DeviceLost from it marks the device lost."""
        try:
            yield
        except DeviceLost as err:
            self._lost.setdefault(spec, str(err))
            raise

    def speed(self, spec: DeviceSpec) -> MachineSpeed:
        """The device's undisturbed speed, as its reference workload has shown it so far."""
        return self._speeds.setdefault(spec, MachineSpeed())


def xdist_group(spec: DeviceSpec) -> str | None:
    """The xdist group of a device's cases: a real device's spec, so one worker owns it and no
    two of its cases ever run at once (their timings would mean nothing), and a device named for
    a worker (``worker=ID``: the group is what that worker is given); None for an emulated
    device, whose cases may spread over the workers."""
    return None if spec.kind.emulates_cpu and spec.worker is None else spec.id
