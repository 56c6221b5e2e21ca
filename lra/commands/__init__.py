"""The commands: train, eval, leaderboard, and the modules only they use (grid_plan, measuring,
references). They sit above configs/: they load configs and pass the values into the library
(lra.data, lra.training, lra.reporting, lra.models), which never imports configs/ or this
package (tests/test_layers.py checks both)."""
