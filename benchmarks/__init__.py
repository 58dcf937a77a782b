"""The benchmark suite: how good autotune's recommendations are, side by side with alternatives.

``python -m benchmarks`` runs every section and writes its run into ``benchmarks/RESULTS.md``
(the run it replaces moves to ``benchmarks/log/``);
``python -m benchmarks --smoke`` runs a tiny version of the same code (see README.md).
The package imports nothing at the top, so its helper processes (``_plain_loop``,
``_finders``) start without loading the suite.
"""
