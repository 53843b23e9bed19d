"""A recipe: the commands from a competition folder to a checked submission, run as one (``whale recipe``).

A recipe file (``recipes/flukes.yaml``: the best submission on real flukes; ``recipes/demo.yaml``: the same shape on
the synthetic demo data) lists steps, each a ``whale`` command line with placeholders (``{data}``, ``{out}``,
``{store}``, ``{trunk}``, ``{fold}``, ``{configs}``). ``whale recipe`` runs them in order, each as a process of its
own with its log under ``--out``, and records each finished step with its command, so that a killed recipe goes on
from the first unfinished step and a step whose command changed runs again with every step after it.

:mod:`whale.recipe.steps` (the recipe file and its placeholders), :mod:`whale.recipe.state` (which steps are done,
and which to run), :mod:`whale.recipe.runner` (one step as a measured, logged process),
:mod:`whale.recipe.display` (progress and the closing table), :mod:`whale.recipe.cook` (the steps in order),
:mod:`whale.recipe.__main__` (the command). Not :mod:`whale.ensemble.recipe`: that one is an ensemble as a file
(``recipes/paper.yaml``, ``whale ensemble --recipe``).
"""
