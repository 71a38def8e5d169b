"""History: every judged case kept, one JSON line each, so that trends and steps can be drawn.

A session given ``--sme2-history=DIR`` appends one :class:`HistoryRecord` per judged case to a file
of its own, ``DIR/<utc time>-<host>-<pid>-<worker>.jsonl``: opened for appending, one line per
case, flushed per line, never rewritten. Why one file per session and xdist worker: CI jobs on
different runners each upload theirs, and a later job merges them by copying the files into one
directory — no two writers ever share a file, so nothing needs a lock or a merge step (asv keeps
its results the same way).

A record is the lossless case record (:class:`pytest_sme2.records.measurement.Measurement`) plus
where it was taken: the commit, branch and dirty flag of the project's git repository, the UTC time,
the device spec, the machine class and the gates' verdicts. Each line carries ``schema_version``;
the reader loads older schemas through :data:`UPGRADES` and names a record of a newer one instead of
guessing at it.

Reading is forgiving by design: a truncated or foreign file, a newer schema, a commit the
repository does not have (a shallow clone), no git at all each give one line naming the file or
the cause (:attr:`History.problems`), and the page is built from the rest.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from pytest_sme2.errors import Sme2Error
from pytest_sme2.judge.baseline_file import package_version
from pytest_sme2.records.measurement import Measurement
from pytest_sme2.records.verdict import Verdict

#: The record layout written now. A change of layout bumps it and adds the step from the version
#: before to :data:`UPGRADES`, so every record ever written stays readable.
#: 2: ``no_commit``, why a record has no commit
#: 3: each variant's ``peak_rss_bytes`` is the runner's own (VmHWM), no longer ``ru_maxrss``
SCHEMA_VERSION = 3


def _without_session_peak_rss(doc: dict[str, Any]) -> dict[str, Any]:
    """A version-2 record's peak resident memory was ``ru_maxrss``, which a runner started by
    vfork inherits from the pytest session (hundreds of MiB, whatever the model): dropped, so a
    trend never joins it to the runner's own figure as if memory had fallen tenfold."""
    measurement = doc["measurement"]
    variants = [
        {**v, "load": v.get("load") and {**v["load"], "peak_rss_bytes": None}}
        for v in measurement["variants"]
    ]
    return {**doc, "measurement": {**measurement, "variants": variants}}


#: schema version → the function lifting a record's JSON of that version to the next one
UPGRADES: Mapping[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    # a version-1 record without a commit did not say why
    1: lambda doc: {**doc, "no_commit": None if doc["commit"] else "not recorded (schema 1)"},
    2: _without_session_peak_rss,
}
#: A history file's name ends so.
SUFFIX = ".jsonl"
#: The trend page a session writes into its history directory: the one other file expected there.
PAGE_NAME = "index.html"


@dataclass(frozen=True)
class GitState:
    """Which commit of the project a session measured. All None where there is no repository."""

    commit: str | None = None
    branch: str | None = None
    #: tracked files differ from the commit (untracked files, such as run artifacts, do not count)
    dirty: bool | None = None
    #: the commit's committer time, ISO 8601: orders commits when the repository is not at hand
    commit_time: str | None = None
    #: why there is no commit (git missing, not a git repository, no commit yet), for the page
    no_commit: str | None = None


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip()


def _git_state_of(root: Path) -> GitState:
    """The git state of the repository holding ``root``; without a commit, ``no_commit`` says
    why in words a reader of the history page acts on."""
    try:
        commit = _git(root, "rev-parse", "HEAD")
        branch: str | None = _git(root, "rev-parse", "--abbrev-ref", "HEAD")
        dirty = bool(_git(root, "status", "--porcelain", "--untracked-files=no"))
        commit_time = _git(root, "show", "-s", "--format=%cI", "HEAD")
    except FileNotFoundError:
        return GitState(no_commit="git missing (no git on PATH)")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
        said = (getattr(err, "stderr", "") or "").strip()
        why = said.splitlines()[0] if said else str(err)
        if "not a git repository" in said:
            return GitState(no_commit=f"not a git repository: {root}")
        if "ambiguous argument 'HEAD'" in said:
            return GitState(no_commit=f"no commit yet in the repository of {root}")
        return GitState(no_commit=f"git failed in {root}: {why}")
    if branch == "HEAD":
        branch = os.environ.get("GITHUB_HEAD_REF") or os.environ.get("GITHUB_REF_NAME") or None
    return GitState(commit, branch, dirty, commit_time)


def git_state(*roots: Path) -> tuple[GitState, str | None]:
    """The git state of the first of ``roots`` inside a repository with a commit, and a warning
    line when none is.

    The plugin passes the directory pytest was invoked in, then the rootdir: pytest takes
    existing paths among option values it does not know yet for test paths (``--sme2-baseline-dir
    ../b``), which can move the rootdir out of the project's repository; where the user stands
    cannot move. A CI checkout is a detached HEAD and still has its commit; the branch is then
    taken from GitHub's ``GITHUB_HEAD_REF`` (a pull request) or ``GITHUB_REF_NAME``, else None.
    """
    states = []
    for root in dict.fromkeys(roots):
        state = _git_state_of(root)
        if state.commit is not None:
            return state, None
        states.append(state)
    first = states[0]
    return first, f"history records carry no commit: {first.no_commit}"


@dataclass(frozen=True)
class HistoryRecord:
    """One judged case: the case record, the verdicts, and where and when it was taken."""

    measurement: Measurement
    verdicts: tuple[Verdict, ...]
    git: GitState
    #: when the case was judged (UTC)
    time: datetime
    #: the device spec the session ran it on (``qemu-sme2:vl=32``)
    device: str
    nodeid: str
    #: the test's artifact directory: the record's file paths are relative to it
    artifacts: Path
    pytest_sme2: str = field(default_factory=package_version)

    @property
    def class_id(self) -> str:
        return self.measurement.device.class_id

    def to_json(self) -> dict[str, Any]:
        m = self.measurement
        return {
            "schema_version": SCHEMA_VERSION,
            "pytest_sme2": self.pytest_sme2,
            "time": self.time.isoformat(),
            "commit": self.git.commit,
            "branch": self.git.branch,
            "dirty": self.git.dirty,
            "commit_time": self.git.commit_time,
            "no_commit": self.git.no_commit,
            "device": self.device,
            "class_id": m.device.class_id,
            "machine_class": dict(m.device.machine_class),
            "nodeid": self.nodeid,
            "artifacts": str(self.artifacts),
            "measurement": m.to_json(self.artifacts),
            "verdicts": [v.to_json() for v in self.verdicts],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HistoryRecord:
        """A record of any schema this version knows; :class:`HistoryError` names what is not."""
        if not isinstance(data, Mapping) or "schema_version" not in data:
            raise HistoryError("not a pytest-sme2 history record")
        schema = data["schema_version"]
        if not isinstance(schema, int) or schema > SCHEMA_VERSION:
            raise HistoryError(
                f"schema {schema} is newer than this pytest-sme2 ({package_version()}) reads "
                f"({SCHEMA_VERSION}): upgrade pytest-sme2"
            )
        doc = dict(data)
        while schema < SCHEMA_VERSION:
            doc = UPGRADES[schema](doc)
            schema += 1
        artifacts = Path(doc["artifacts"])
        return cls(
            measurement=Measurement.from_json(doc["measurement"], artifacts),
            verdicts=tuple(Verdict.from_json(v) for v in doc["verdicts"]),
            git=GitState(
                doc["commit"], doc["branch"], doc["dirty"], doc["commit_time"], doc["no_commit"]
            ),
            time=datetime.fromisoformat(doc["time"]),
            device=doc["device"],
            nodeid=doc["nodeid"],
            artifacts=artifacts,
            pytest_sme2=doc["pytest_sme2"],
        )


class HistoryError(Sme2Error):
    """A history line that cannot be read, and why (one line)."""


class HistoryWarning(UserWarning):
    """The session's history records carry no commit (git missing, not a repository, none yet)."""


def session_file_name(now: datetime, worker: str) -> str:
    """``20261124T044300Z-runner-1234-gw0.jsonl``: sorted by time, unique per session and worker,
    so files copied together from many CI runners never collide."""
    host = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in socket.gethostname())
    return f"{now:%Y%m%dT%H%M%SZ}-{host or 'host'}-{os.getpid()}-{worker}{SUFFIX}"


class HistoryLog:
    """This session's (and worker's) history file, created on the first record.

    Append-only and flushed per line: a session killed half way leaves every judged case
    recorded and at worst one truncated last line, which the reader names and skips.
    """

    def __init__(self, directory: Path, git: GitState, worker: str = "main") -> None:
        self.directory = directory
        self.git = git
        self.worker = worker
        self._file: IO[str] | None = None
        self.path: Path | None = None

    def append(self, record: HistoryRecord) -> None:
        if self._file is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self.path = self.directory / session_file_name(datetime.now(UTC), self.worker)
            self._file = self.path.open("a", encoding="utf-8")
        self._file.write(json.dumps(record.to_json(), separators=(",", ":")) + "\n")
        self._file.flush()

    def record(
        self,
        measurement: Measurement,
        verdicts: Sequence[Verdict],
        *,
        device: str,
        nodeid: str,
        artifacts: Path,
    ) -> HistoryRecord:
        """Append the record of one judged case, taken now, at this session's commit."""
        record = HistoryRecord(
            measurement=measurement,
            verdicts=tuple(verdicts),
            git=self.git,
            time=datetime.now(UTC),
            device=device,
            nodeid=nodeid,
            artifacts=artifacts.resolve(),
        )
        self.append(record)
        return record

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


@dataclass(frozen=True)
class History:
    """The readable records of a history directory, and one line per thing that was not."""

    records: tuple[HistoryRecord, ...]
    problems: tuple[str, ...]


def read_history(directory: Path) -> History:
    """Every record of every ``*.jsonl`` file under ``directory`` (copied in from many runners,
    perhaps in sub-directories, as ``actions/download-artifact`` lays them out).

    A file with unreadable lines (truncated by a killed session, not JSON, not a record, a newer
    schema) gives one line naming it, the first cause and how many lines were skipped; its
    readable lines are kept.
    """
    if not directory.is_dir():
        raise HistoryError(f"{directory}: no such history directory")
    records: list[HistoryRecord] = []
    problems: list[str] = []
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        if path.suffix != SUFFIX:
            if path.name != PAGE_NAME:
                problems.append(f"{path}: not a history file (*{SUFFIX}); skipped")
            continue
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as err:
            problems.append(f"{path}: unreadable ({err}); skipped")
            continue
        bad: list[str] = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                records.append(HistoryRecord.from_json(json.loads(line)))
            except json.JSONDecodeError:
                last = number == len(lines)
                bad.append(f"line {number} is {'truncated' if last else 'not JSON'}")
            except HistoryError as err:
                bad.append(f"line {number}: {err}")
            except (KeyError, TypeError, ValueError) as err:
                bad.append(f"line {number} is not a pytest-sme2 history record ({err!r})")
        if bad:
            more = f" ({len(bad)} line(s) skipped)" if len(bad) > 1 else ""
            problems.append(f"{path}: {bad[0]}{more}; the rest is used")
    return History(tuple(records), tuple(problems))


# --- commits in order -------------------------------------------------------------------------


def _when(record: HistoryRecord) -> datetime:
    """The commit's time where the record has it, else when the record was taken."""
    if record.git.commit_time:
        return datetime.fromisoformat(record.git.commit_time)
    return record.time


def commit_ranks(
    records: Sequence[HistoryRecord], repo: Path | None
) -> tuple[dict[str, float], tuple[str, ...]]:
    """Each recorded commit's place in history, and one line per reason the order is a guess.

    The order is the repository's (``git rev-list --topo-order``): commit times are only a
    second apart at best and a rebase rewrites them. A commit the repository lacks (a shallow
    clone, a branch not fetched) is placed after the last known commit that is not newer than
    it; with no repository at all every commit is placed by its time.
    """
    times: dict[str, datetime] = {}
    for record in records:
        if record.git.commit is not None:
            times[record.git.commit] = min(
                times.get(record.git.commit, _when(record)), _when(record)
            )
    if not times:
        return {}, ()
    by_time = sorted(times, key=lambda c: times[c])
    listed: list[str] = []
    problem = ""
    if repo is None:
        problem = "no repository given: commits are ordered by their commit time"
    else:
        try:
            listed = _git(repo, "rev-list", "--topo-order", "--reverse", "--all").split()
        except FileNotFoundError:
            problem = "no git: commits are ordered by their commit time"
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
            lines = (getattr(err, "stderr", "") or "").strip().splitlines()
            problem = (
                f"{repo} is not a git repository ({lines[-1] if lines else err}): commits are "
                "ordered by their commit time"
            )
    if problem:
        return {c: float(i) for i, c in enumerate(by_time)}, (problem,)
    index = {c: i for i, c in enumerate(listed)}
    ranks = {c: float(index[c]) for c in times if c in index}
    missing = [c for c in by_time if c not in index]
    for order, commit in enumerate(missing):
        before = [ranks[c] for c in ranks if c in index and times[c] <= times[commit]]
        # after the last known commit not newer than it; missing ones keep their time order
        ranks[commit] = max(before, default=-1.0) + 0.5 + order / (2 * len(missing) + 2)
    problems: tuple[str, ...] = ()
    if missing:
        problems = (
            f"{len(missing)} commit(s) not in the repository at {repo} (a shallow clone?): "
            f"{', '.join(c[:7] for c in missing)}; placed by their commit time",
        )
    return ranks, problems
