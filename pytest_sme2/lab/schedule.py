"""Which xdist worker runs which case when a fleet names workers (``mac:worker=mini1``): a
scheduler for pytest-xdist's controller (``pytest_xdist_make_scheduler``).

A device named for a worker is a Mac or an SME2 Linux box in a lab, reached through an execnet
gateway (``--tx socket=HOST:PORT//id=mini1``): its cases measure that machine's CPU, so they must
run there and nowhere else — xdist's own ``loadgroup`` keeps a group on one worker but lets any
worker take it. Here each such device's cases (its xdist group, the spec: ``measure.fleet.
xdist_group``) go to the worker of that id, all at once, and every other case is dealt, a group
or a test at a time, to the workers no device names (the local ones), as ``loadgroup`` deals.

A named worker that cannot be reached as the session starts is left out (``lab.reach``), and
its devices' cases fail in one line each. A named worker that goes away (its machine off, the
gateway's process killed) cannot hand its cases to another: xdist fails the case it was running,
and each case it had not started fails here in one line naming the device and the worker, while
the other workers go on. xdist then replaces a crashed worker by a clone of its gateway's spec;
a clone of a gateway whose server is gone would stop the whole session, and one whose server
still holds the dead gateway would wait for ever, so a lost remote worker is replaced by a local
one (which takes the local cases still queued; ``lab.hooks``). One that goes down before it
collected (its pytest could not start) is a worker that was not there.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from pytest_sme2.records.outcome import CaseOutcome

#: xdist's worker controller (``xdist.workermanage.WorkerController``): typed loosely, as this
#: module is imported where xdist may not be installed
Node = Any


def group_of(nodeid: str) -> str | None:
    """The xdist group a worker appended to ``nodeid`` (``…]@GROUP`` under ``loadgroup``)."""
    at = nodeid.rfind("@")
    return nodeid[at + 1 :] if at > nodeid.rfind("]") else None


def lost_outcome(nodeid: str, line: str) -> dict[str, Any]:
    """The outcome payload of a case its worker could not finish: unmeasured, failed, ``line``
    the reason (the session's report lists it with the cases not measured)."""
    device = group_of(nodeid) or ""
    return CaseOutcome(nodeid, device, "", "", 0, unmeasured=("failed", line)).to_json()


class PinnedScheduling:
    """xdist's scheduling protocol (``xdist.scheduler.protocol.Scheduling``): each group of
    ``pinned`` (a device spec → its worker's id) to that worker, the rest dealt to the others."""

    def __init__(
        self,
        hook: Any,
        numnodes: int,
        log: Any,
        pinned: Mapping[str, str],
        gone: Callable[[str], str],
    ) -> None:
        """``hook`` is the session's (``config.hook``: the reports of the cases failed here go
        through it), ``numnodes`` how many workers collect before anything is scheduled,
        ``gone(worker)`` why that worker went away, in a few words."""
        self.hook = hook
        self.log = log
        self.pinned = dict(pinned)
        self._gone = gone
        self.numnodes = numnodes
        self.collection: list[str] | None = None
        self._collections: dict[Node, list[str]] = {}
        self._pending: dict[Node, list[int]] = {}
        self._queue: deque[list[int]] = deque()
        self._held: dict[str, list[int]] = {}  # a named worker's cases, until it takes them

    @property
    def nodes(self) -> list[Node]:
        return list(self._pending)

    @property
    def collection_is_completed(self) -> bool:
        return len(self._collections) >= self.numnodes

    @property
    def tests_finished(self) -> bool:
        return self.collection_is_completed and not self.has_pending

    @property
    def has_pending(self) -> bool:
        return bool(self._queue or self._held or any(self._pending.values()))

    def add_node(self, node: Node) -> None:
        self._pending[node] = []

    def add_node_collection(self, node: Node, collection: Sequence[str]) -> None:
        if self.collection is not None and list(collection) != self.collection:
            from xdist.report import report_collection_diff

            first = next(iter(self._collections))
            self.log(
                report_collection_diff(
                    self.collection, collection, first.gateway.id, node.gateway.id
                )
            )
            node.shutdown()
            return
        self._collections[node] = list(collection)

    def mark_test_complete(self, node: Node, item_index: int, duration: float = 0) -> None:
        self._pending[node].remove(item_index)
        self._feed(node)

    def mark_test_pending(self, item: str) -> None:
        raise NotImplementedError

    def remove_pending_tests_from_node(self, node: Node, indices: Sequence[int]) -> None:
        raise NotImplementedError

    def schedule(self) -> None:
        """Split the collection once (every worker collected the same tests), then give each
        worker what it may take; called again as a worker (a replacement) comes up."""
        if self.collection is None:
            if not self._same_collections():
                return
            self.collection = next(iter(self._collections.values()))
            self._split(self.collection)
            workers = {node.gateway.id for node in self._pending}
            for worker in [worker for worker in self._held if worker not in workers]:
                self._fail(self._held.pop(worker), worker, f"was not there ({self._gone(worker)})")
        for node in self.nodes:
            self._feed(node)

    def _same_collections(self) -> bool:
        """Every worker collected the same tests; else each difference is a collection error
        (a lab machine's checkout at another commit, as xdist says it) and nothing runs."""
        from xdist.report import report_collection_diff

        (first, collected), *others = self._collections.items()
        for node, collection in others:
            said = report_collection_diff(collected, collection, first.gateway.id, node.gateway.id)
            if said:
                report = pytest.CollectReport(node.gateway.id, "failed", said, [])
                self.hook.pytest_collectreport(report=report)
        if any(collection != collected for _, collection in others):
            for node in self.nodes:
                node.shutdown()
            return False
        return True

    def _split(self, collection: Sequence[str]) -> None:
        units: dict[str, list[int]] = {}
        for index, nodeid in enumerate(collection):
            group = group_of(nodeid)
            if group in self.pinned:
                self._held.setdefault(self.pinned[group], []).append(index)
            else:
                units.setdefault(group or nodeid, []).append(index)
        self._queue.extend(units.values())

    def _feed(self, node: Node) -> None:
        """Send ``node`` more work: a named worker all its cases at once; another worker the
        next units while it has fewer than two cases pending; then shut it down once nothing is
        left for it (xdist's worker runs a test once it knows the next one, or that there is
        none)."""
        if node.shutting_down or node not in self._collections:
            return
        worker, pending = node.gateway.id, self._pending[node]
        if worker in self.pinned.values():
            indices = self._held.pop(worker, [])
            if indices:
                pending.extend(indices)
                node.send_runtest_some(indices)
            node.shutdown()
            return
        while len(pending) < 2 and self._queue:
            unit = self._queue.popleft()
            pending.extend(unit)
            node.send_runtest_some(unit)
        if not self._queue:
            node.shutdown()

    def remove_node(self, node: Node) -> str | None:
        """``node`` finished or went away: the case it was running (xdist fails it); its other
        cases failed here if its worker is named for a device, else queued again for the other
        workers."""
        pending = self._pending.pop(node)
        if not pending or self.collection is None:
            return None
        worker = node.gateway.id
        if worker in self.pinned.values():
            self._fail(pending[1:], worker, f"went away ({self._gone(worker)})")
        elif pending[1:]:
            self._queue.appendleft(pending[1:])
            for other in self.nodes:
                self._feed(other)
        return self.collection[pending[0]]

    def crash_line(self, nodeid: str, worker: str) -> str:
        """The one line of the case a named worker was running when it went away."""
        return self._line(nodeid, worker, f"went away ({self._gone(worker)}) while running it")

    def _line(self, nodeid: str, worker: str, what: str) -> str:
        group = group_of(nodeid) or "its device"
        return f"{group}: the xdist worker {worker!r} that runs its cases {what}"

    def _fail(self, indices: Sequence[int], worker: str, what: str) -> None:
        """Fail each case of ``indices`` in one line: its worker cannot run it."""
        assert self.collection is not None
        for index in indices:
            nodeid = self.collection[index]
            path = nodeid.split("::")[0]
            line = self._line(nodeid, worker, what)
            report = pytest.TestReport(nodeid, (path, None, path), {}, "failed", line, "call")
            report.sme2_outcome = lost_outcome(nodeid, line)  # type: ignore[attr-defined]
            self.hook.pytest_runtest_logreport(report=report)
