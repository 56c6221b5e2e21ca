"""Reporting: the speed/memory benchmark, the accuracy and speed tables, and the charts.

Everything here but lra.reporting.benchmark's measuring child is pure Python + numpy (no JAX),
so reports can be rebuilt from saved JSON on any machine."""
