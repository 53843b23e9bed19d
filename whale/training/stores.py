"""Decoded box crops a training run keeps between epochs, one store per (dataset, crop size)."""
from __future__ import annotations

from whale.data import ImageSet


class CropStores:
    """Decoded box crops cached per (dataset, crop size), so each file is read once per size.

    ``crop``: the config's ``crop`` rule for photos without a box (:class:`whale.data.ImageStore`).
    """

    def __init__(self, channels: int, margin: float, mode: str = "memory", crop: str = "box"):
        self.channels, self.margin, self.mode, self.crop, self._cache = channels, margin, mode, crop, {}

    def get(self, key: str, images: ImageSet, crop_size):
        if (key, crop_size) not in self._cache:
            # Drop stores of other sizes: the schedule never goes back to a smaller size.
            self._cache = {k: v for k, v in self._cache.items() if k[1] == crop_size}
            self._cache[(key, crop_size)] = images.store(crop_size, channels=self.channels,
                                                         margin=self.margin, cache=self.mode, crop=self.crop)
        return self._cache[(key, crop_size)]
