"""`python -m lra.data TASK ...`: the data command (lra.data.command)."""
from lra.data import command

command.main()
