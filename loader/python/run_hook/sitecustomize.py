"""Loaded by every Python that `epochfs run` starts (this folder leads its PYTHONPATH).

It installs epochfs.hook (every torch DataLoader publishes each epoch's order to its
epochfs mount) the moment the script imports torch.utils.data, and not before: a Python
that never imports torch pays nothing. Then it runs the sitecustomize this one hides
(Debian's), so the interpreter starts as it would without `epochfs run`.
"""
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_TARGET = "torch.utils.data.dataloader"
_here = os.path.dirname(os.path.abspath(__file__))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of _TARGET to install the hook right after
    that module has run."""

    def find_spec(self, name, path, target=None):
        if name != _TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is None or spec.loader is None:
                continue
            exec_module = spec.loader.exec_module

            def exec_and_hook(module, exec_module=exec_module):
                exec_module(module)
                try:
                    import epochfs.hook
                    epochfs.hook.install()
                except Exception as e:  # never break the script's start
                    sys.stderr.write(f"epochfs run: the DataLoader hook is not installed: {e!r}\n")

            spec.loader.exec_module = exec_and_hook
            return spec
        return None


if os.environ.get("EPOCHFS_RUN_HOOK", "1") != "0":
    sys.meta_path.insert(0, _AfterImport())


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
