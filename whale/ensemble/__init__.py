"""Ensembling: several runs' score files averaged (:mod:`whale.ensemble.combine`) and turned into a
submission by ``ensemble.py`` (:mod:`whale.ensemble.cli`) in four steps: the rule resolved
(:mod:`whale.ensemble.rule`), the runs combined (:mod:`whale.ensemble.combined`), ``new_whale`` placed
(:mod:`whale.ensemble.decide`), the submission, files and summary written (:mod:`whale.ensemble.report`)."""
