"""What the tests and the benchmarks both run: a real pigeond as a subprocess, stand-ins
for opencode and its model, a private PostgreSQL cluster, raw HTTP clients, polling.

A package of its own so that ``bench/`` imports it as ``tests/`` does, without reaching
into the test suite; it is not part of the installed pigeond."""
