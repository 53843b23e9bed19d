"""The seed papers' tables and toy experiments, and the toolkit's accuracy on small public and synthetic sets.

Each seed paper's protocol run as written where it says and ours where it is silent (seed 000's Table I, seed
001's toy, seed 002's Table II, seed 004's ORL and MNIST tables), and the paper's pipeline measured on the
synthetic competition of ``make demo``, Omniglot and lions: the miner, the objectives, boxes, tricks and the
starter config (README rows 1-6, 8-12 and 14; docs/benchmarks.md, docs/objectives.md, docs/seed002.md).

* ``synthetic.py``: the miner ablation on the synthetic competition (pixels, random and adversarial negatives).
* ``omniglot.py``: Omniglot one-shot on unseen characters, random vs adversarial negatives.
* ``omniglot_schedules.py``: which K / learning-rate schedule lets the miner help on Omniglot.
* ``lions.py``: lion re-identification on real wildlife photos.
* ``orl.py``: seed 004's ORL faces experiment (Table 4.1), similarity models compared.
* ``mnist.py``: seed 004 on MNIST (Tables 4.2-4.4), a siamese MLP on similarity labels.
* ``objectives.py``: the objectives side by side on the same pipeline (synthetic, Omniglot, lions).
* ``global_toy.py``: seed 001's toy experiment, the global loss and flipped labels (Fig. 3).
* ``homography.py``: seed 000's homographic equivalence of disk patterns (Table I).
* ``homography_pretrain.py``: homography pairs as self-supervised pre-training, at the same optimiser steps.
* ``seed002.py``: seed 002's protocol exactly on the real flukes (Table II's whale column).
* ``tricks.py``: the top 2019 solutions' tricks, each added alone, on the synthetic competition.
* ``starter.py``: ``configs/starter.yaml`` on every set we have, against the raw-pixel baseline.
* ``boxes.py``: box models on the synthetic competition: cross-validated IoU, then MAP@5 with predicted boxes.
* ``box_heads.py``: the VGG box regressor's dense and integral heads side by side.
* ``catalogue.py``: the catalogue on the synthetic competition (or lions) and its scale, against seed 002's top-10.
"""
