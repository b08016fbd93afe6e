"""Errors the user can fix. The CLI prints them as one line each and exits with code 2."""

from __future__ import annotations


class UserError(Exception):
    """A problem with the user's input (file, argument, sweep directory). Exit code 2."""

    exit_code = 2

    def __init__(self, message: str, *, details: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or []

    def lines(self) -> list[str]:
        """One line per problem: the headline, then one per detail."""
        return [self.message, *self.details]
