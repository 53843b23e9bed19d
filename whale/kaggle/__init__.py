"""Kaggle: kernel folders and the code dataset (:mod:`whale.kaggle.kernels`, ``python -m whale.kaggle.kernels``)
and what a kernel runs (:mod:`whale.kaggle.entry`)."""
