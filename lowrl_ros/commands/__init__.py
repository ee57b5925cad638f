"""Sub-commands of `lowrl`; each module has add_arguments(parser) and run(args) -> int."""
