"""What the driver knows about Ray Tune's trials (as opposed to the points they train).

Which points each live Tune trial holds, which trials a restore brought back and which of
them reported in this launch, the concurrency gate, and the launch's time accounting. The
cell book decides about points; this decides about trials. No Ray object in here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass
class LaunchStats:
    started: float
    train_seconds: float = 0.0  # summed over trials, this launch only
    points_finished: int = 0
    trials_started: int = 0
    reports: int = 0  # trial reports received, this launch only
    tune_snapshots: int = 0  # Ray Tune experiment snapshots written, this launch only
    infra_faults: dict[str, int] = field(default_factory=dict)  # trials ended by an infrastructure fault, by kind
    trial_seconds: dict[str, float] = field(default_factory=dict)  # last train_seconds seen per Tune trial
    trial_spans: dict[str, list[float]] = field(default_factory=dict)  # [started, last event] per Tune trial (driver clock)

    @property
    def alive_seconds(self) -> float:
        """Summed lifetime of the trials (start to end as the driver saw them): training plus each
        trial's own overhead (start-up, checkpoints, reports); the rest of the slot-time is idle."""
        return sum(end - start for start, end in self.trial_spans.values())

    def touch(self, tune_trial_id: str, now: float) -> None:
        self.trial_spans.setdefault(tune_trial_id, [now, now])[1] = now


class TuneTrials:
    """The live Tune trials of one launch and the concurrency gate over them."""

    def __init__(self, concurrency: int, started: float) -> None:
        self.concurrency = concurrency
        self.points: dict[str, list[str]] = {}  # live Tune trial -> the point ids it trains
        self.restored: set[str] = set()  # trials of an earlier launch that a Tune restore resumes
        self.reported: set[str] = set()  # trials that reported at least once in this launch
        self.stats = LaunchStats(started=started)

    def restore(self, claimed: Mapping[str, Iterable[str]]) -> None:
        """The trials a Tune restore will resume, with their point ids."""
        for tid, pids in claimed.items():
            self.points[tid] = list(pids)
            self.restored.add(tid)

    def gate_open(self) -> bool:
        """Room for one more trial under the YAML's concurrency (also when a restored Tune run
        allowed more)."""
        return len(self.points) < self.concurrency

    def assigned(self, tune_trial_id: str, point_ids: Iterable[str]) -> None:
        """A new trial (the Searcher's suggestion) holds these points."""
        self.points[tune_trial_id] = list(point_ids)
        self.stats.trials_started += 1

    def started(self, tune_trial_id: str, point_ids: Iterable[str], now: float) -> None:
        self.stats.touch(tune_trial_id, now)
        self.points.setdefault(tune_trial_id, list(point_ids))

    def reporting(self, tune_trial_id: str, train_seconds: float, now: float) -> None:
        """A report: count the training time it adds (a restored trial's time from before this
        launch is not counted: from its first report here on)."""
        last = self.stats.trial_seconds.get(tune_trial_id)
        if last is None:
            last = train_seconds if tune_trial_id in self.restored else 0.0
        if train_seconds > last:
            self.stats.train_seconds += train_seconds - last
        self.stats.trial_seconds[tune_trial_id] = max(train_seconds, last)
        self.reported.add(tune_trial_id)
        self.stats.reports += 1
        self.stats.touch(tune_trial_id, now)

    def unrestorable(self, tune_trial_id: str, error: str | None) -> bool:
        """A restored trial that failed before its first report here could not be restored."""
        return bool(error) and tune_trial_id in self.restored and tune_trial_id not in self.reported

    def ended(self, tune_trial_id: str, now: float) -> None:
        self.stats.touch(tune_trial_id, now)
        self.points.pop(tune_trial_id, None)

    def forget_restored(self) -> dict[str, list[str]]:
        """Tune could not restore its last run: its trials are gone. Returns them with their points."""
        gone = {tid: self.points.pop(tid, []) for tid in sorted(self.restored)}
        self.restored.clear()
        return gone
