"""`dam` subcommands, one module each; every module exposes `register(subparsers)`."""
