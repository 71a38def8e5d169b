"""The runner pair options, ``--sme2-runner-on/--sme2-runner-off``, that the android and mac
devices both take: the user's runner, and optionally a second one built without SME/SME2 kernels
for SME2-off.

Apart from either device so that neither imports the other.
"""

from __future__ import annotations

from collections.abc import Callable

#: The spec keys of the runner options, for the devices that take them.
RUNNER_SPEC_KEYS = {"runner-on": "sme2_runner_on", "runner-off": "sme2_runner_off"}


def add_runner_options(add: Callable[..., None]) -> None:
    """``--sme2-runner-on/--sme2-runner-off``, shared by the android and mac devices: whichever
    registers its options first adds them (pytest refuses a flag added twice)."""
    try:
        add(
            "--sme2-runner-on",
            dest="sme2_runner_on",
            default=None,
            help="android, mac: the sme2_runner binary to run (SME2 on); its shared libraries "
            "are taken from beside it and its RUNPATH",
        )
        add(
            "--sme2-runner-off",
            dest="sme2_runner_off",
            default=None,
            help="android, mac: a second runner built without SME/SME2 kernels, used for "
            "SME2-off instead of hiding SME from --sme2-runner-on",
        )
    except ValueError as err:  # already added by the other device
        if "already added" not in str(err):
            raise
