"""The ``tunedb`` command line: ``main`` parses, ``commands/`` holds one module per command group."""
