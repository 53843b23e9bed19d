"""One identification from all the evidence (``whale score --matcher joint``).

Every source's candidates (each keypoint feature kind's votes, each trained run's scores) merged into one shortlist
per query, every shortlisted pair verified by every feature kind, and one check of all of it: P(same whale) per
pair, aggregated to the individual. :mod:`whale.identify.config` (the settings), :mod:`whale.identify.sources` (the
trained runs' scores and the shortlist), :mod:`whale.identify.check` (the pair table and the check),
:mod:`whale.identify.thin` (the check fitted on a validation thinned as the test is drawn),
:mod:`whale.identify.score` (the command's flow). ``whale catalogue match --method joint``
(:mod:`whale.catalogue.joint`) fits the same check on a catalogue's own photos, each left out of its own row.
"""
