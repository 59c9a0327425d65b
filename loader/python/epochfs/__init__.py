"""epochfs: the GPU prefetch loader for PyTorch, and the hook that lets unmodified
DataLoaders publish their order to an epochfs mount.

``epochfs.Loader`` replaces ``torch.utils.data.DataLoader`` for data sets of files: it
reads each epoch's samples in the exact order the sampler asks for, many files in flight
on several threads with io_uring, stages them in pinned memory and copies each batch to
the GPU on a side CUDA stream. With ``decode="image"`` it decodes JPEG batches on the GPU
(nvJPEG through torchvision) and applies the training or evaluation transforms there,
yielding normalised image tensors ready for the model. On an epochfs mount it also
publishes each epoch's order, so the filesystem prefetches exactly what comes next.

    loader = epochfs.Loader("/data/train", batch_size=256, shuffle=True,
                            decode="image", size=224, train=True)
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        for images, labels in loader:   # bf16[256, 3, 224, 224] channels_last, int64[256]
            ...

This package imports without PyTorch: ``epochfs.hook`` (what ``epochfs run`` loads) and
the scanning and order helpers need none. ``epochfs.Loader`` needs PyTorch, and its image
pipeline torchvision; using them without says what to install.
"""

from ._epochfs import cuda_compiled, cuda_usable, scan_image_folder, shard_order, shuffled_order

__all__ = [
    "Loader",
    "scan_image_folder",
    "shard_order",
    "shuffled_order",
    "cuda_compiled",
    "cuda_usable",
]

_NEEDS_TORCH = (
    "epochfs.Loader needs PyTorch, which this Python cannot import ({error}). Install it: "
    "`apt install python3-torch python3-torchvision` for Debian's python3, or "
    "`pip install torch torchvision` in your virtual environment."
)


def __getattr__(name):
    # PEP 562: the Loader (and torch with it) is imported on first use, not at import.
    if name == "Loader":
        try:
            from .loader import Loader
        except ImportError as e:
            if getattr(e, "name", None) in ("torch", "torch.utils", "torch.utils.dlpack"):
                raise ImportError(_NEEDS_TORCH.format(error=e), name="torch") from e
            raise
        return Loader
    raise AttributeError(f"module 'epochfs' has no attribute {name!r}")
