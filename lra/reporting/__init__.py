"""Reporting: the speed/memory benchmark, the accuracy and speed tables, and the charts.

Everything here but lra.reporting.benchmark's measuring (JAX, run in the child process of
lra.commands.measuring) is pure Python + numpy (no JAX), so reports can be rebuilt from saved JSON on
any machine. Nothing here imports configs/: the commands pass in what comes from it."""
