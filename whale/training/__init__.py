"""Training: one fold under a schedule. The per-epoch plan (:mod:`whale.training.schedule`), the pairs
fed to Keras (:mod:`whale.training.pairs`), the trainer (:mod:`whale.training.trainer`), its log
(:mod:`whale.training.runlog`) and device distribution (:mod:`whale.training.distribute`)."""
