"""One file per registered mixer (fla's layers), each holding its own projections and gates;
the registry imports every module here on its first lookup (models/registry.py). A mixer file
imports blocks and ops, never another mixer file."""
