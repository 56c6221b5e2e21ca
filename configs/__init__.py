"""ml_collections configs: one file per task, `get_config(arg)` with the model named by arg."""
