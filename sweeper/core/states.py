"""The states of a point and of a cell, with what they mean (the one list of their names).

A *point* is one learning rate of a cell. It is `queued` (waiting for, or assigned to, a Tune
trial that has not started it), `running`, or finished: `ok` (a final evaluation), `diverged`
(the divergence rules stopped it: it counts as worse than any finite result), `stalled` (it
trained to the end, but its final evaluation loss is not `divergence.stall_margin` below the
loss of predicting by token frequencies: it learned nothing else, and counts like a diverged
point, although its loss is kept) `failed` (a crash of the training code: it carries no information about the
loss) or `infra_failed` (the infrastructure failed it — CUDA out of memory, the storage, a lost node
or actor, a preemption — after the driver's retries: no information either, and not the learning
rate's fault; the next launch proposes it again by itself). `PointState` answers those questions.

A *cell*'s status is what bracketing decided (`sweeper.search.bracketing.decide`), or
`pending`/`running` before that. A cell whose every informative point diverged or stalled ends
`diverged` (all diverged) or `stalled` (at least one stalled): the method found no usable
learning rate at that size (`CellStatus.learned_nothing`), which the figures mark as a failure.
A fixed-recipe cell (no search) ends `fixed`, `diverged`, `stalled` or `failed`. A cell that holds an
`infra_failed` point is `infra_failed` once nothing else of it is active: bracketing waits for that point
(it is never a neighbour, and never ends the cell as `failed`), and the next launch retries it.

No imports beyond the standard library: every package of the sweeper reads these.
"""

from __future__ import annotations

from enum import Enum


class PointState(str, Enum):
    """A point's state; compares and hashes equal to its name (`PointState.OK == "ok"`)."""

    QUEUED = "queued"
    RUNNING = "running"
    OK = "ok"
    DIVERGED = "diverged"
    STALLED = "stalled"
    FAILED = "failed"
    INFRA_FAILED = "infra_failed"

    __str__ = str.__str__
    __format__ = str.__format__

    @property
    def is_active(self) -> bool:
        """Queued or running: a Tune trial holds it, or will."""
        return self in (PointState.QUEUED, PointState.RUNNING)

    @property
    def is_finished(self) -> bool:
        """Never assigned again in this launch (the next launch retries an `infra_failed` one by itself,
        a `failed` one when `--retry-failed` asks)."""
        return not self.is_active

    @property
    def retried_on_relaunch(self) -> bool:
        """Proposed again by the next launch without being asked: an infrastructure fault says nothing
        about the learning rate."""
        return self is PointState.INFRA_FAILED

    @property
    def blocks_its_cell(self) -> bool:
        """Bracketing waits for it as for an active point (the result it lacks may be the optimum or a
        neighbour); unlike an active point, nothing trains it before the next launch."""
        return self is PointState.INFRA_FAILED

    @property
    def counts_as_diverged(self) -> bool:
        """Finished worse than any ok result (diverged, or stalled at the frequency-only loss): a
        neighbour that brackets an optimum, never an optimum, never in a fit."""
        return self in (PointState.DIVERGED, PointState.STALLED)


class CellStatus(str, Enum):
    """A cell's status in the store, the tables and the dashboards."""

    PENDING = "pending"
    RUNNING = "running"
    BRACKETED = "bracketed"  # the best ok point has a finished neighbour on each side
    EDGE = "edge"  # a bound or the point cap stopped the search before bracketing
    DIVERGED = "diverged"  # every informative point diverged, down to a bound or the cap
    STALLED = "stalled"  # every informative point diverged or stalled (some stalled), down to a bound or the cap
    FAILED = "failed"  # every point crashed
    FIXED = "fixed"  # a fixed-recipe cell (`lr: {fixed: X}`): its one learning rate trained ok; no optimum searched
    INFRA_FAILED = "infra_failed"  # waits for points the infrastructure failed; done for this launch, the next retries them

    __str__ = str.__str__
    __format__ = str.__format__

    @property
    def is_done(self) -> bool:
        return self not in (CellStatus.PENDING, CellStatus.RUNNING)

    @property
    def learned_nothing(self) -> bool:
        """Done without a usable learning rate: every informative point diverged or stalled (the
        study's "fails at this depth"; a cell of crashes is `failed`, which says nothing about the method)."""
        return self in (CellStatus.DIVERGED, CellStatus.STALLED)


ACTIVE_STATES: tuple[PointState, ...] = tuple(s for s in PointState if s.is_active)
FINISHED_STATES: tuple[PointState, ...] = tuple(s for s in PointState if s.is_finished)
POINT_STATES: tuple[str, ...] = tuple(s.value for s in PointState)
CELL_STATUSES: tuple[str, ...] = tuple(s.value for s in CellStatus)
