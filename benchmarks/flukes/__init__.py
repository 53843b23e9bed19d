"""The real humpback flukes: every method on photos of the 2019 competition, through the user's own commands.

These benchmarks read ``../shared/data/humpback`` beside the checkout (half of the competition's identified
individuals; nothing of it is committed; each prints a message and exits 0 when it is absent) and measure what
identifies real whales: the training-free keypoint matcher, networks trained here or on a lent GPU, their fusion,
and the catalogue a user keeps, on Kaggle-like splits with ``new_whale`` (README rows 13 and 15; docs/humpback.md).

* ``shared.py``: what they share (the split, its pack, the metrics, the user's commands); imports none of them.
* ``humpback.py``: every method on Kaggle-like splits of the real flukes, MAP@5 per split seed.
* ``humpback_runs.py``: ``humpback.py``'s learned runs: configs trained here, GPU runs scored here, each fused.
* ``humpback_breakdown.py``: a finished run's known queries by their individual's gallery photos.
* ``humpback_compare.py``: two runs of ``humpback.py`` side by side, paired by split seed.
* ``mined_pairs.py``: a miner-trained run's mined negatives: near copies and geometric inliers against random pairs.
* ``humpback_misses.py``: what a second run holds of the first run's top-5 misses, on validation.
* ``humpback_probes.py``: probes of the keypoint matcher on the mirror validation split.
* ``humpback_growth.py``: the keypoint matcher as flipped distractors grow the gallery to the competition's size.
* ``humpback_newwhale.py``: every rule that places ``new_whale`` on a run's test sets, beside the true share.
* ``matcher_variants.py``: query-time settings of the keypoint matcher on a split's validation fold, its selector read back.
* ``humpback_pack.py``: the splits' photos packed small enough to travel to a lent GPU.
* ``catalogue_unknown.py``: a small catalogue of real flukes and a batch of mostly unknown whales.
* ``humpback_fuse.py``: several runs fused on each split seed, gains paired by seed (ids only, one-photo whales).
* ``joint_screen.py``: the joint identification's check and aggregation variants, on validation, from its pair table.
* ``joint_recall.py``: where the joint identification loses its known whales: each source's shortlist, the merged one, the five.
* ``fusion_compare.py``: calibrated fusion against raw scores and the log weight grid on a split's score runs.
* ``learned_descriptor.py``: a learned local descriptor against RootSIFT in the same keypoint matcher.
* ``pixel_scores.py``: raw-pixel score files beside another run's, a cheap second run for fusion.
* ``review_page.py``: the review server on real flukes, driven by keys in headless Chromium (screenshots).
"""
