"""The EfficientNet trunk's fused convolution + ReLU6 gives the bits of a convolution followed by a clamp."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from worldeval.opis.backends import efficientnet as E  # noqa: E402


@pytest.mark.parametrize("last_block, head, shape", [(15, True, (5, 3, 128, 128)), (10, False, (1, 3, 96, 160))])
def test_fused_conv_clamp_equals_convolution_then_clamp(last_block, head, shape):
    model, _ = E._load()
    fused = E._FusedTrunk(model, last_block, head)
    if E._conv_clamp_op() is None:
        pytest.skip("this torch has no fused oneDNN convolution")
    plain = E._FusedTrunk(model, last_block, head)
    plain.fused = False  # F.conv2d, then clamp_ in place
    inp = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        a, b = fused(inp), plain(inp)
    assert a.shape == b.shape
    assert torch.equal(a, b)
    # the fused op applies the clamp itself: the stem's output lies in [0, 6]
    with torch.inference_mode():
        y = fused._conv(fused.stem, inp.contiguous(memory_format=torch.channels_last))
    assert float(y.min()) >= 0.0 and float(y.max()) <= 6.0
