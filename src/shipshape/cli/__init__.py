"""Command-line entry points (`shipshape ...`)."""
