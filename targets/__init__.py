"""Targets: implementations the spec's traces are replayed against, behind one protocol."""
