"""Siamese models: branches (registry, factory, weights), the head and its compiled scorer, model files.

See ``docs/ARCHITECTURE.md``. Inputs to every model are float32 raw pixels 0..255; each
branch preprocesses inside itself.
"""
from whale.models.checkpoint import load_checkpoint, read_state, save_checkpoint
from whale.models.factory import build_branch
from whale.models.head import PairFeatures, build_head, head_param_count
from whale.models.io import architecture_difference, load_model, save_model
from whale.models.precision import precision_scope
from whale.models.preprocessing import Preprocess
from whale.models.registry import (
    BRANCHES,
    BranchDef,
    branch_spec,
    check_input_shape,
    feature_dim,
    get_branch_def,
)
from whale.models.scorer import HeadScorer
from whale.models.siamese import (
    PairGather,
    build_siamese,
    compile_model,
    compile_siamese,
    is_shared,
    model_image_size,
    model_input_size,
    resize_siamese,
    set_l2,
    set_branch_trainable,
    transfer_branch,
)
from whale.models.weights import adapt_first_conv, load_branch_weights

__all__ = [
    "BRANCHES",
    "BranchDef",
    "HeadScorer",
    "PairFeatures",
    "PairGather",
    "Preprocess",
    "adapt_first_conv",
    "architecture_difference",
    "branch_spec",
    "build_branch",
    "precision_scope",
    "build_head",
    "build_siamese",
    "check_input_shape",
    "compile_model",
    "compile_siamese",
    "feature_dim",
    "get_branch_def",
    "head_param_count",
    "is_shared",
    "load_branch_weights",
    "load_checkpoint",
    "load_model",
    "model_image_size",
    "model_input_size",
    "read_state",
    "resize_siamese",
    "save_checkpoint",
    "save_model",
    "set_branch_trainable",
    "set_l2",
    "transfer_branch",
]
