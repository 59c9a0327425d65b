"""Loaded by every Python that `epochfs run` starts (this folder leads its PYTHONPATH).

It registers epochfs_autohook, which installs epochfs.hook (every torch DataLoader
publishes each epoch's order to its epochfs mount) the moment the script imports
torch.utils.data, and not before: a Python that never imports torch pays nothing. Then
it runs the sitecustomize this one hides (Debian's), so the interpreter starts as it
would without `epochfs run`.
"""
import importlib.machinery
import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))

try:
    import epochfs_autohook
    epochfs_autohook.register("epochfs run")
except ImportError as e:  # never break the script's start
    sys.stderr.write(f"epochfs run: the DataLoader hook is not installed: {e!r} "
                     "(this Python does not find the epochfs package)\n")


def _run_hidden_sitecustomize():
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == _here:
            continue
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [entry])
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return


_run_hidden_sitecustomize()
