"""Errors in a trial's inputs that the user can fix (a missing file, a too-small vocabulary,
an optional extra that is not installed, a dataset that cannot be reached offline).

`trials` sits below `sweeper` and does not import it; command code turns a
`TrialInputError` into `sweeper.core.errors.UserError` (one line, exit code 2).
"""

from __future__ import annotations


class TrialInputError(ValueError):
    """A problem with the trial's configuration or data, stated in one line that names the field."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
