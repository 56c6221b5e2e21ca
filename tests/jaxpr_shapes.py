"""For the tests that check a mixer never forms an L x L array."""


def array_shapes(jaxpr):
  """Every intermediate shape in a jaxpr, nested calls included."""
  for eqn in jaxpr.eqns:
    for var in eqn.outvars:
      yield tuple(getattr(var.aval, "shape", ()))
    for value in eqn.params.values():
      for sub in value if isinstance(value, (list, tuple)) else [value]:
        inner = getattr(sub, "jaxpr", sub)
        if hasattr(inner, "eqns"):
          yield from array_shapes(inner)
