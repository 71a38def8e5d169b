"""Where a model runs: the host, an emulated Armv9 with SME2 (qemu), a Mac, an Android phone.

Every device implements one interface (``pytest_sme2.devices.base.Device``) the plugin talks to.
"""
