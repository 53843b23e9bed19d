"""whale.keypoints.learn: the descriptor's loss comes from the objective registry, with section 5.2's constants."""
import numpy as np
import pytest

from whale.keypoints.learn import descriptor_loss


@pytest.mark.parametrize("name", ["tgloss", "global"])
def test_descriptor_loss_is_the_registered_objectives_with_its_defaults(name):
    import keras

    from whale.objectives.globalloss import global_loss, tg_loss

    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(4), 2).astype(np.int32)
    emb = rng.normal(size=(8, 16)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    plain = (tg_loss if name == "tgloss" else global_loss)(keras.ops.convert_to_tensor(labels),
                                                          keras.ops.convert_to_tensor(emb))
    loss = descriptor_loss(name)
    assert loss.name == name
    assert float(loss(labels, emb)) == pytest.approx(float(plain), rel=1e-6)


def test_descriptor_loss_refuses_an_objective_it_does_not_train_with():
    with pytest.raises(ValueError, match="expected one of"):
        descriptor_loss("arcface")
