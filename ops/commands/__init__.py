"""``ratchet`` subcommands: each module here defines ``register(subparsers)``.

A module adds its parser with ``subparsers.add_parser(...)`` and sets
``func`` (taking the parsed args, returning an exit code) as its default.
"""
