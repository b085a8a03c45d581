"""The EfficientNet trunk's fused convolution + ReLU6 gives the bits of a convolution followed by a clamp
(with the evaluator's one thread and batches of at least CROP_CHUNK crops)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from worldeval.opis.backends import efficientnet as E  # noqa: E402


# The evaluator embeds with one math thread and in chunks of at least CROP_CHUNK crops (`min_batch`):
# there the fused op gives the bits of the two-step one. Below that oneDNN picks other kernels, and
# the fused op differs in the last bits (the evaluator always fuses, so its descriptors keep theirs);
# the thread count is set here because a test before this one may have left another.
@pytest.mark.parametrize("last_block, head, shape, exact", [
    (15, True, (E.CROP_CHUNK, 3, 128, 128), True), (10, False, (1, 3, 96, 160), True), (15, True, (5, 3, 128, 128), False)])
def test_fused_conv_clamp_equals_convolution_then_clamp(last_block, head, shape, exact):
    model, _ = E._load()
    fused = E._FusedTrunk(model, last_block, head)
    if E._conv_clamp_op() is None:
        pytest.skip("this torch has no fused oneDNN convolution")
    plain = E._FusedTrunk(model, last_block, head)
    plain.fused = False  # F.conv2d, then clamp_ in place
    inp = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    with E.torch_threads(1), torch.inference_mode():
        a, b = fused(inp), plain(inp)
    assert a.shape == b.shape
    if exact:
        assert torch.equal(a, b)
    else:
        assert torch.allclose(a, b, rtol=0, atol=1e-4)
    # the fused op applies the clamp itself: the stem's output lies in [0, 6]
    with torch.inference_mode():
        y = fused._conv(fused.stem, inp.contiguous(memory_format=torch.channels_last))
    assert float(y.min()) >= 0.0 and float(y.max()) <= 6.0


@pytest.mark.parametrize("n", [0, 1, 15, 16, 31, 32, 36, 78])
def test_crop_chunks_cover_every_crop_once_in_runs_of_at_least_sixteen(n):
    parts = E.crop_chunks(n)
    assert [i for p in parts for i in range(n)[p]] == list(range(n))
    sizes = [p.stop - p.start for p in parts]
    assert max(sizes) - min(sizes) <= 1
    assert n < 2 * E.CROP_CHUNK and len(parts) == 1 or min(sizes) >= E.CROP_CHUNK
    assert {36: [18, 18], 78: [20, 20, 19, 19]}.get(n, sizes) == sizes


def test_embedding_in_runs_gives_the_bits_of_one_batch(monkeypatch):
    rng = np.random.default_rng(3)
    image = rng.integers(0, 256, (240, 320, 3), dtype=np.uint8)
    boxes = [(int(x), int(y), int(w), int(h)) for x, y, w, h in zip(rng.integers(0, 250, 40), rng.integers(0, 180, 40),
                                                                      rng.integers(8, 70, 40), rng.integers(8, 60, 40))]
    masks = []
    for x, y, w, h in boxes:
        m = np.zeros(image.shape[:2], bool)
        m[y : y + h, x : x + w] = True
        masks.append(m)
    emb = E.EfficientNetColourEmbedder()
    runs = emb.embed(image, masks, boxes)  # 40 crops: two runs of 20
    monkeypatch.setattr(E, "CROP_CHUNK", 1000)  # the same 40 crops in one batch
    one = emb.embed(image, masks, boxes)
    assert runs.shape == (40, emb.dim)
    np.testing.assert_array_equal(runs, one)
