"""What every model module of the `hf` backend shares: loading a checkpoint (the option named in every
failure), the models folder, and image preprocessing read from each checkpoint's `preprocessor_config.json`.

Preprocessing takes one of two routes, chosen per model family:

- the official `transformers` image processor, for the families whose processor
  has a PIL/numpy implementation that imports without torchvision (DINOv2's
  BitImageProcessor, Depth Anything's DPT processor, Prompt Depth Anything,
  ViTPose, LightGlue, EfficientLoFTR): `OFFICIAL_PROCESSORS`;
- `TensorPrep`, our torch implementation of the official processor's arithmetic,
  for the families whose processor exists only on the torchvision backend
  (SAM 3, SAM 2, DINOv3, DepthPro). It reproduces that backend's order of
  operations per family (`ORDERS`), with sizes, means, stds, rescale factor and
  resampling taken from the checkpoint's config; a config field it cannot honour
  is an error naming the file and the field, never a silent drift.

Without a config file (a checkpoint that ships none), the official class's
defaults are used, as the official processor would.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from typing import Any

import numpy as np


# options of build_hf_backend naming a model (id or local path)
MODEL_OPTIONS = ("sam3", "sam2", "dinov3", "dinov2", "vitpose", "vitpose_animal", "depth", "matcher")
MANIFEST = "models.json"  # in a models folder: which hub repository and revision each option came from


class HFBackendError(ValueError):
    """A model option that cannot be used; names the option and the path or id given."""

    def __init__(self, option: str, value: Any, message: str):
        self.option = option
        self.value = value
        super().__init__(f"hf backend option {option}={value!r}: {message}")


def torch_device(device: str):
    import torch

    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise HFBackendError("device", device, "CUDA is not available on this machine")
    return dev


def torch_dtype(dtype: str | None):
    import torch

    if dtype in (None, "float32", "fp32"):
        return torch.float32
    table = {"float16": torch.float16, "fp16": torch.float16, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}
    if dtype not in table:
        raise HFBackendError("dtype", dtype, "expected float32, float16 or bfloat16")
    return table[dtype]


def load_config(option: str, name: str, local_files_only: bool = True):
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(str(name), local_files_only=local_files_only)
    except Exception as exc:  # noqa: BLE001 - re-raised with the option named
        where = "local folder" if Path(str(name)).exists() else "hub id (offline cache)"
        raise HFBackendError(option, name, f"cannot read the model config from this {where}: {exc}") from exc


def load_model(option: str, cls, name: str, device, dtype=None, local_files_only: bool = True):
    """`cls.from_pretrained` in eval mode on `device`, with the failure naming the option."""
    import torch

    try:
        model = cls.from_pretrained(str(name), local_files_only=local_files_only, dtype=dtype or torch.float32)
    except Exception as exc:  # noqa: BLE001
        raise HFBackendError(option, name, f"cannot load {cls.__name__}: {exc}") from exc
    return model.to(device).eval()


def model_version(name: str, model) -> str:
    """What a run manifest records for a model: its id/path and a hash of its config."""
    cfg = model.config.to_dict()
    cfg.pop("_name_or_path", None)
    cfg.pop("transformers_version", None)
    digest = hashlib.sha256(json.dumps(cfg, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return f"{type(model).__name__}:{name}@{digest}"


def default_models_dir() -> Path:
    """WORLDEVAL_MODELS_DIR, else ~/.cache/worldeval/models."""
    env = os.environ.get("WORLDEVAL_MODELS_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "worldeval" / "models"


def models_in(root: str | Path) -> dict[str, str]:
    """option -> checkpoint folder, for every option folder of `root` holding a config.json."""
    root = Path(root).expanduser()
    return {o: str(root / o) for o in MODEL_OPTIONS if (root / o / "config.json").is_file()}


IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
HALF = (0.5, 0.5, 0.5)

# piece kind -> PIL/numpy image processor class in transformers (imports without torchvision)
OFFICIAL_PROCESSORS = {
    "dinov2": "BitImageProcessorPil",
    "dinov2_with_registers": "BitImageProcessorPil",
    "depth_anything": "DPTImageProcessorPil",
    "prompt_depth_anything": "PromptDepthAnythingImageProcessorPil",
    "vitpose": "VitPoseImageProcessorPil",
    "lightglue": "LightGlueImageProcessorPil",
    "efficientloftr": "EfficientLoFTRImageProcessorPil",
}

# the torchvision-only processors: what each does, in order, and its class defaults
# (transformers 5.24: Sam3ImageProcessor, Sam2ImageProcessor, DINOv3ViTImageProcessor, DepthProImageProcessor)
ORDERS = {
    "sam3": ("resize_uint8", {"size": 1008, "mean": HALF, "std": HALF}),
    "sam2": ("resize_uint8", {"size": 1024, "mean": IMAGENET_MEAN, "std": IMAGENET_STD}),
    "dinov3_vit": ("rescale_resize_normalize", {"size": 224, "mean": IMAGENET_MEAN, "std": IMAGENET_STD}),
    "depth_pro": ("normalize_resize", {"size": 1536, "mean": HALF, "std": HALF}),
}
RESAMPLE = {0: "nearest", 2: "bilinear", 3: "bicubic"}  # PIL codes used in preprocessor configs


def read_preprocessor_config(option: str, name: str, local_files_only: bool = True) -> tuple[dict, str | None]:
    """The checkpoint's image-processor settings and the file they came from; ({}, None) when it ships none.

    A processor saved as a whole (`processor_config.json`, SAM 3) nests them under "image_processor".
    """
    from transformers.utils import cached_file

    for fname, key in (("preprocessor_config.json", None), ("processor_config.json", "image_processor")):
        local = Path(str(name)) / fname
        path = str(local) if local.is_file() else None
        if path is None and not Path(str(name)).exists():
            try:
                path = cached_file(str(name), fname, local_files_only=local_files_only,
                                   _raise_exceptions_for_missing_entries=False,
                                   _raise_exceptions_for_connection_errors=False)  # fmt: skip
            except Exception:  # noqa: BLE001 - a hub id not in the cache: the model load reports it
                path = None
        if not path:
            continue
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise HFBackendError(option, name, f"cannot read {path}: {exc}") from exc
        if key is not None:
            data = data.get(key)
            if not isinstance(data, dict):
                continue
        return data, path
    return {}, None


def official_processor(option: str, kind: str, name: str, local_files_only: bool = True):
    """The official PIL/numpy image processor of this family, configured from the checkpoint."""
    import transformers

    cls = getattr(transformers, OFFICIAL_PROCESSORS[kind])
    cfg, path = read_preprocessor_config(option, name, local_files_only)
    if path is None:
        return cls()
    kwargs = {k: v for k, v in cfg.items() if k not in ("image_processor_type", "processor_class")}
    try:
        return cls(**kwargs)
    except Exception as exc:  # noqa: BLE001
        raise HFBackendError(option, name, f"{path}: cannot configure {cls.__name__}: {exc}") from exc


def _size_field(value, path, option) -> tuple[int, int]:
    if isinstance(value, (int, float)):
        return int(value), int(value)
    if isinstance(value, dict) and "height" in value and "width" in value:
        return int(value["height"]), int(value["width"])
    raise HFBackendError(option, path, f"field 'size' = {value!r}: expected {{'height', 'width'}}")


@dataclass(frozen=True)
class TensorPrep:
    """Pixels for a torchvision-only processor family, the official arithmetic in torch."""

    size: tuple[int, int]  # height, width
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    rescale: float
    resample: str
    order: str
    source: str  # the config file read, or "defaults of <family>"

    @classmethod
    def from_checkpoint(cls, option: str, kind: str, name: str, local_files_only: bool = True) -> "TensorPrep":
        order, defaults = ORDERS[kind]
        cfg, path = read_preprocessor_config(option, name, local_files_only)
        where = path or f"defaults of {kind}"
        for flag in ("do_center_crop", "do_pad", "do_convert_rgb_to_bgr"):
            if cfg.get(flag):
                raise HFBackendError(option, where, f"field {flag!r} is set: the {kind} preprocessing here does not do it")
        if cfg.get("do_resize") is False or cfg.get("do_rescale") is False or cfg.get("do_normalize") is False:
            raise HFBackendError(option, where, "do_resize/do_rescale/do_normalize false: not a supported configuration")
        code = int(cfg.get("resample", 2))
        if code not in RESAMPLE:
            raise HFBackendError(option, where, f"field 'resample' = {code}: expected one of {sorted(RESAMPLE)}")
        mean = tuple(float(v) for v in cfg.get("image_mean", defaults["mean"]))
        std = tuple(float(v) for v in cfg.get("image_std", defaults["std"]))
        if len(mean) != 3 or len(std) != 3 or min(std) <= 0:
            raise HFBackendError(option, where, f"fields 'image_mean'/'image_std' = {mean}/{std}: need 3 values, std > 0")
        return cls(size=_size_field(cfg.get("size", defaults["size"]), where, option), mean=mean, std=std,
                   rescale=float(cfg.get("rescale_factor", 1 / 255)), resample=RESAMPLE[code], order=order,
                   source=where)  # fmt: skip

    def describe(self) -> str:
        """What a run manifest records: every setting the pixels depend on, and where it was read."""
        f = lambda v: ",".join(f"{x:g}" for x in v)  # noqa: E731
        return (f"{self.order} {self.size[0]}x{self.size[1]} {self.resample} rescale={self.rescale:.6g} "
                f"mean={f(self.mean)} std={f(self.std)} from {Path(self.source).name}")  # fmt: skip

    def check_size(self, option: str, expected: tuple[int, int], what: str) -> None:
        if tuple(self.size) != tuple(expected):
            raise HFBackendError(option, self.source, f"field 'size' = {self.size} but the model's {what} is {tuple(expected)}")

    def _resize(self, x, size):
        import torch.nn.functional as F

        mode = self.resample
        kw = {} if mode == "nearest" else {"align_corners": False}
        # torchvision antialiases bilinear/bicubic resizes of tensors, except where a processor turns it off
        aa = mode != "nearest" and self.order != "normalize_resize"
        return F.interpolate(x, size=size, mode=mode, antialias=aa, **kw)

    def __call__(self, images, device, dtype=None, size: tuple[int, int] | None = None):
        """H x W x 3 uint8 RGB image(s) -> N x 3 x h x w float tensor on `device`."""
        import torch

        if isinstance(images, np.ndarray) and images.ndim == 3:
            images = [images]
        size = tuple(int(s) for s in (size or self.size))
        m = torch.tensor(self.mean, device=device).view(1, 3, 1, 1)
        s = torch.tensor(self.std, device=device).view(1, 3, 1, 1)
        out = []
        for img in images:
            if img.ndim != 3 or img.shape[2] != 3:
                raise ValueError(f"expected an H x W x 3 RGB image, got shape {img.shape}")
            x = torch.from_numpy(np.require(img, dtype=np.uint8, requirements=["C", "W"])).to(device).permute(2, 0, 1)[None]
            resize = tuple(x.shape[-2:]) != size
            if self.order == "resize_uint8":
                if resize and x.device.type == "cpu" and self.resample == "bilinear":
                    x = self._resize(x, size)  # torch resizes uint8 directly here, as torchvision does
                elif resize:
                    x = self._resize(x.float(), size).round_().clamp_(0, 255)
                x = (x.float() - m / self.rescale) / (s / self.rescale)
            elif self.order == "rescale_resize_normalize":
                x = x.float() * self.rescale
                x = ((self._resize(x, size) if resize else x) - m) / s
            else:  # normalize_resize
                x = (x.float() * self.rescale - m) / s
                x = self._resize(x, size) if resize else x
            out.append(x)
        x = torch.cat(out)
        return x.to(dtype) if dtype is not None else x


def describe_processor(processor) -> str:
    """The settings of an official processor that its pixels depend on (for run manifests)."""
    keys = ("size", "crop_size", "do_center_crop", "resample", "rescale_factor", "image_mean", "image_std",
            "keep_aspect_ratio", "ensure_multiple_of", "do_grayscale", "do_pad", "size_divisor")  # fmt: skip
    d = {k: getattr(processor, k) for k in keys if getattr(processor, k, None) is not None}
    plain = lambda v: {a: b for a, b in vars(v).items() if b is not None} if hasattr(v, "__dataclass_fields__") else v  # noqa: E731
    d = {k: plain(v) for k, v in d.items()}
    return f"{type(processor).__name__} " + json.dumps(d, sort_keys=True, default=str)


def official_pixels(processor, images, device, dtype=None, **kwargs):
    """`pixel_values` of an official processor as a tensor on `device` (optionally cast)."""
    batch = processor(images=images, return_tensors="pt", **kwargs)
    x = batch["pixel_values"].to(device)
    return x.to(dtype) if dtype is not None else x
