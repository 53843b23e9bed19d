"""Data: the competition folder, images and their box crops, the fold rules, the fold's image sets.

Images flow ``file -> decoded image -> box crop (ImageStore) -> augmented or plain model input``;
nothing here imports Keras. The synthetic competition is :mod:`whale.data.synth`.
"""
from whale.data.competition import (
    BOXES_CSV,
    SAMPLE_CSV,
    Competition,
    load_competition,
    read_box_rows,
    read_boxes,
    read_solution,
    read_train_csv,
    safe_image_path,
)
from whale.data.folds import assign_folds, fold_summary, split
from whale.data.images import Box, crop_to_box, load_crop, load_image
from whale.data.imagesets import FoldData, ImageSet, fold_data, playground_data
from whale.data.store import ImageStore, crop_size_for

__all__ = [
    "BOXES_CSV",
    "Box",
    "Competition",
    "FoldData",
    "ImageSet",
    "ImageStore",
    "SAMPLE_CSV",
    "assign_folds",
    "crop_size_for",
    "crop_to_box",
    "fold_data",
    "fold_summary",
    "load_competition",
    "load_crop",
    "load_image",
    "playground_data",
    "read_box_rows",
    "read_boxes",
    "read_solution",
    "read_train_csv",
    "safe_image_path",
    "split",
]
