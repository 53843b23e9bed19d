"""What a training run's batches read, kept between epochs: decoded box crops per (dataset, crop size), or a
trunk run's maps per dataset (:mod:`whale.inference.trunk`)."""
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


class TrunkStores:
    """A trunk run's maps per dataset key (the fold's gallery with its augmented views; the validation queries
    plain), through the trunk of ``cfg``'s branch, kept in ``cache`` (:class:`whale.inference.trunk.TrunkMaps`)."""

    def __init__(self, cfg, cache=None, progress: bool = True):
        self.cfg, self.cache, self.progress, self.maps, self._stores = cfg, cache, progress, None, {}

    def top(self):
        """A new top of the run's branch (the model a trunk run trains), its trunk built beside it."""
        from whale.inference.trunk import TrunkMaps

        self.maps, top = TrunkMaps.for_config(self.cfg, self.cache, progress=self.progress)
        return top

    def get(self, key: str, images: ImageSet):
        if key not in self._stores:
            if self.maps is None:  # a resumed run: its model came from a checkpoint
                self.top()
            self._stores[key] = self.maps.store(images.paths, images.boxes, views=key != "val")
        return self._stores[key]
