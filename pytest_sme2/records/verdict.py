"""What a gate says: a :class:`Verdict` (pass, fail or skip, with a reviewer's sentence and its
details). A record every stage after judging reads — the reports, the history, the outcome a
test leaves — so it lives below them all."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class Status(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True)
class Verdict:
    gate: str
    status: Status
    message: str
    details: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "gate": self.gate,
            "status": self.status.value,
            "message": self.message,
            "details": list(self.details),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Verdict:
        return cls(data["gate"], Status(data["status"]), data["message"], tuple(data["details"]))
