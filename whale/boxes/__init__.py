"""Bounding boxes learned from a few hand-labelled images: the paper's two box models, averaged.

``vgg`` (a ConvNet on VGG16's layout regressing the two corners) and ``retinanet`` (keras-cv's
RetinaNet on an explicitly built ResNet, highest-scoring box) are trained with cosine annealing
with restarts and cross-validated K-fold (:mod:`whale.boxes.train`); their corners are averaged
(:mod:`whale.boxes.geometry`) and written as ``bounding_boxes.csv`` for a whole competition
folder (:mod:`whale.boxes.predict`). Ours, beside the paper's average: ``refine: true`` looks again
at each averaged box through a crop around it at full resolution (:mod:`whale.boxes.refine`).
Command line: ``python -m whale.boxes train|predict|eval``
(:mod:`whale.boxes.cli`).
"""
