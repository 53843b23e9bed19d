"""Adding an objective is one class registered by name: a toy objective, written here and nowhere else, is read
by the config, listed in docs/configs.md, trained by ``train_fold`` on P x K batches and scored in [0, 1]."""
import numpy as np
import pytest

pytestmark = pytest.mark.backend


def _toy_class():
    """The toy objective: unit embeddings of width 8, FaceNet's semi-hard triplet loss on them (seed 002's loss class,
    another margin), scored by cosine."""
    from whale.objectives.base import IdentityObjective
    from whale.objectives.triplet import TripletLoss

    class Toy(IdentityObjective):
        name = "toy"
        batches = "identities"
        params = {"embedding": (int, 1, None, 8), "margin": (float, 0.0, None, 0.2)}
        meanings = {"margin": "the toy's margin on squared distances of unit embeddings"}

        def loss(self, classes=None):
            return TripletLoss(self.cfg["margin"])

    return Toy


@pytest.fixture
def toy():
    from whale.objectives.registry import register, unregister

    cls = register(_toy_class())
    yield cls
    unregister(cls.name)


def _cfg(**over):
    from whale.config import config_from_dict

    return config_from_dict({"name": "t", "stages": [{"epochs": 1, "k": 1.0, "lr": 1e-3, "image_size": 32}], **over})


def test_the_config_and_the_docs_read_a_registered_objective(toy):
    from whale.config.doc import markdown
    from whale.core.errors import ConfigError
    from whale.config.objectives import identity_objectives, objective_names
    from whale.objectives import build_objective

    assert objective_names()[-1] == "toy" and "toy" in identity_objectives()
    c = _cfg(objective={"name": "toy", "margin": 0.3}, batch_size=16)
    assert dict(c.objective.params) == {"embedding": 8, "margin": 0.3} and c.objective.identities
    assert (c.batch.ids, c.batch.per_id) == (4, 4)
    with pytest.raises(ConfigError, match="objective.margni: unknown key"):
        _cfg(objective={"name": "toy", "margni": 0.3})
    assert "| `toy` | `margin` | `0.2` | a number > 0.0 | the toy's margin" in markdown()
    assert isinstance(build_objective(c.objective), toy)


def test_unregistered_the_toy_is_unknown_again(toy):
    from whale.core.errors import ConfigError
    from whale.objectives.registry import objective_class, unregister

    unregister("toy")
    with pytest.raises(ConfigError, match="objective.name: expected one of head"):
        _cfg(objective="toy")
    with pytest.raises(ValueError, match="unknown name 'toy'"):
        objective_class("toy")


def test_the_registry_refuses_a_second_objective_of_a_name_and_a_class_without_one(toy):
    from whale.objectives.base import IdentityObjective
    from whale.objectives.registry import register

    other = type("Other", (toy,), {"params": {"embedding": (int, 1, None, 16)}})
    with pytest.raises(ValueError, match="'toy'"):
        register(other)
    with pytest.raises(ValueError, match="named subclass"):
        register(type("Nameless", (IdentityObjective,), {}))


def test_every_objective_s_class_says_what_its_source_declares():
    # The config reads the declarations from the modules' source (no Keras); the classes are what trains.
    from whale.config.objectives import SPEC_FIELDS, objective_specs
    from whale.objectives.registry import objective_classes

    classes = objective_classes()
    assert set(classes) == set(objective_specs())
    for name, cls in classes.items():
        assert {f: getattr(cls, f) for f in SPEC_FIELDS} == objective_specs()[name].__dict__, name


def test_a_toy_objective_trains_and_scores_through_the_normal_path(toy, tmp_path):
    from conftest import TINY_RUN
    from whale.config import config_from_dict, load_config
    from whale.data.synth import generate
    from whale.inference.scorefile import load_score_file
    from whale.training.trainer import train_fold

    data = generate(tmp_path / "data", n_ids=10, seed=3, size=64, progress=False)
    cfg = config_from_dict({"name": "toy", "seed": 0, **TINY_RUN, "objective": "toy",
                            "stages": [{"epochs": 1, "k": 1000.0, "lr": 1e-3, "image_size": 32}]})
    result = train_fold(cfg, data, 0, tmp_path / "run", verbose=0, log=lambda m: None)
    assert result.finished
    assert load_config(tmp_path / "run" / "config.yaml").objective.name == "toy"
    for split in ("val", "test"):
        s = load_score_file(tmp_path / "run" / "scores" / f"{split}.npz").scores.astype(np.float32)
        assert s.size and np.isfinite(s).all() and s.min() >= 0 and s.max() <= 1 and s.std() > 0
