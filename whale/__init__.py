"""whale: siamese networks with adversarial training for animal re-identification.

Implements Wang, Solovyev et al. (2020), "Method for Whale Re-identification Based on
Siamese Nets and Adversarial Training", for Kaggle's Humpback Whale Identification.
"""

__version__ = "0.1.0"

NEW_WHALE = "new_whale"
