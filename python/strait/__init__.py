"""strait's Python package: ctypes bindings of libstrait.so's C API (``strait._capi``) and the
torch.distributed backend (``import strait.torch``, then ``init_process_group("strait")``).

Importing ``strait`` itself loads nothing; ``strait._capi`` loads libstrait.so on first import
(see ``strait._capi.find_library`` for where it looks).
"""

__all__ = ["__version__"]
__version__ = "0.1.0"
