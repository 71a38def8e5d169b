"""The user-facing regression suite: every registered model × dtype is its own test.

Run on a device with ``pytest tests/test_suite.py --sme2-device=...``. Each test measures SME2-on
and SME2-off (where the device can), then judges speedup floor, category shares, operator
structure, SME2 kernel presence and latency against ``baselines/<device>/<model>-<dtype>.json``.
What the device cannot measure is reported as a skipped gate with the device's reason.
"""

import pytest


@pytest.mark.sme2(speedup_floor=1.0, require_sme2_kernels=True)
def test_model(sme2_measurement, sme2_judge):
    sme2_judge(sme2_measurement)
