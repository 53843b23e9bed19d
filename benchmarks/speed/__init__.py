"""Speed and robustness: how fast the toolkit scores, mines and trains, and whether its machinery holds.

Throughput of the scoring head, the miner, the input pipeline and the branches on the machine at hand (README
row 7; docs/scoring.md, docs/backends.md), and checks that need a real run rather than a unit test: training
killed and resumed, converted weights, the config's way through the code.

* ``bench_scoring.py``: exact head speed, pruned mining and streaming top-k inference at Kaggle's scale.
* ``bench_train.py``: training pairs/s per branch, size and precision: model alone, pipeline alone, end to end.
* ``bench_branches.py``: each branch's forward-pass speed, images per second.
* ``bench_augment.py``: the training augmentation's cost per image, one random stream vs one per transform.
* ``scorer_rebuild.py``: what a fresh head costs the scorer, rebuilt at every mining and validation.
* ``faults.py``: ``kill -9`` a tiny training at random moments, resume it, compare with an uninterrupted run.
* ``convert_check.py``: converted PyTorch weights give the PyTorch model's features (needs torch + timm).
* ``config_walk.py``: which modules ``run_fold.py`` passes the config through before training starts.
"""
