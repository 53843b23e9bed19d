"""What every layer shares (layer 0 of docs/ARCHITECTURE.md): :mod:`whale.core.errors` (the error types of bad
input and :func:`~whale.core.errors.run_guarded`), :mod:`whale.core.files` (the one atomic writer, output checks,
``git_revision``), :mod:`whale.core.arrays` (checked feature arrays, id codes, ``IdGroups``) and
:mod:`whale.core.progress` (tqdm bars). Import from the modules: ``from whale.core.errors import DataError``.
"""
