"""whale: siamese networks with adversarial training for animal re-identification.

Implements Wang, Solovyev et al. (2020), "Method for Whale Re-identification Based on
Siamese Nets and Adversarial Training", for Kaggle's Humpback Whale Identification.
"""

import os

# albumentations asks PyPI for a newer version when imported, unless this is set: no network call
# at run time (Kaggle kernels run offline; the check only prints "Error fetching version info").
# Here, because every entry point (run_fold.py, ensemble.py, python -m whale.*, a kernel's run.py)
# imports whale before albumentations. A value the user set is kept.
os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

__version__ = "0.1.0"

NEW_WHALE = "new_whale"
