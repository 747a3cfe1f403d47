"""The one layer that knows vLLM's internals: its trees, their loading, construction, and every reading of them.

Nothing outside this package imports vLLM or names one of its internals; what differs
between releases is detected here by feature, each difference cited (docs/adapter.md).
"""
