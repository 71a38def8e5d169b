"""A device lab in one session: xdist workers on other machines (a Mac, an SME2 Linux box)
reached through execnet gateways run the cases of the devices named for them (``worker=ID``),
and send back, with each test's report, the files the controller's reports link to and the
history records (docs/lab.md).

``schedule`` is the controller's xdist scheduler, ``shipping`` what crosses with a report,
``hooks`` the pytest and xdist hooks (registered by the plugin) on both sides.
"""
