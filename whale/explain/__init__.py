"""Why the model matched two whales: the paper's heatmaps and match sheets.

:mod:`whale.explain.heatmap` holds the arithmetic (per position, how many feature maps peak
there, and how much the maps disagree there) and reads the branch layer the registry names;
:mod:`whale.explain.sheet` draws heatmaps and match sheets; ``python -m whale.explain``
(:mod:`whale.explain.cli`).
"""
