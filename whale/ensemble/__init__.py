"""Ensembling: several runs' score files averaged (:mod:`whale.ensemble.combine`) and turned into a
submission by ``ensemble.py`` (:mod:`whale.ensemble.cli`; the threshold report: :mod:`whale.ensemble.report`)."""
