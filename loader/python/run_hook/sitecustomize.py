"""Loaded by every Python that `epochfs run` starts (this folder leads its PYTHONPATH).

It registers epochfs_autohook (a copy of which sits in this folder), which installs
epochfs.hook (every torch DataLoader publishes each epoch's order to its epochfs mount)
the moment the script imports torch.utils.data, and not before: a Python that never
imports torch pays nothing. Then it runs the sitecustomize this one hides (Debian's),
so the interpreter starts as it would without `epochfs run`.
"""
import importlib.machinery
import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))

if os.environ.get("EPOCHFS_RUN_HOOK", "1") != "0":
    import epochfs_autohook
    epochfs_autohook.register("epochfs run")


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
