"""One module per `sweeper` subcommand (see `sweeper.cli`)."""
