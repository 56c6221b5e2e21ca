"""The formal-language and state-tracking tasks, beyond LRA: Deletang et al. 2023's
("Neural Networks and the Chomsky Hierarchy") regular (regular.py), deterministic
context-free (dcf.py) and context-sensitive (cs.py) tasks, and Merrill et al. 2024's group word
problems (groups.py). Each is a per-position task trained on short strings and validated and
tested on longer ones: specs.py names them (kinds, vocabularies, layouts, defaults), rows.py
makes a split's rows as a pure function of (task, settings, seed, split), loader.py writes,
reads and loads them (`python -m lra.data TASK`, or on first use). docs/data.md has the
interface and the comparison with the references.
"""
