"""CLI sub-commands, one module per command group; each exposes register(subparsers)."""
