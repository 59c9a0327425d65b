"""epochfs_autohook: epochfs.hook for scripts nobody starts with `epochfs run`.

`epochfs run -- python train.py` makes every torch DataLoader of an unmodified script
publish each epoch's order to its epochfs mount, and its buffered binary opens skip the
isatty() round trip (epochfs/hook.py). A script started by something that cannot be
prefixed (a notebook kernel, an IDE, a scheduler's fixed entry point, a container's
CMD) gets the same from a .pth file in its interpreter's site-packages:

    epochfs python-hook enable            # this machine's python3 (or a venv: --python)
    epochfs python-hook status
    epochfs python-hook disable

(or `python3 -m epochfs_autohook enable|status|disable`). Python runs the .pth line at
every start: it loads this file by its absolute path (a user's site-packages is read
before the system's are on the path) and registers an import hook, nothing else. So a
Python that never imports torch.utils.data pays the load of one small module (it
imports only os and sys, which every start has) and one comparison per import (the cost
of a bare start, measured: docs/benchmarks.md, "Figures behind design choices"). Once
the script imports torch.utils.data, epochfs.hook.install() runs, exactly as under
`epochfs run`. Its data sets off epochfs mounts are left alone (hook.py).

This module stands alone on purpose: the epochfs package imports torch, which no
interpreter start may pay for. `EPOCHFS_RUN_HOOK=0` in the environment turns both the
.pth and `epochfs run` off for one command.
"""
import os
import sys

_TARGET = "torch.utils.data.dataloader"
PTH_NAME = "epochfs-autohook.pth"


def pth_line(module_file):
    """The .pth line that loads `module_file` (this module, by absolute path) and
    registers the hook. A .pth line that starts with "import" is executed. It uses no
    import machinery (importing importlib.util alone is a sizeable part of a bare start:
    docs/benchmarks.md, "Figures behind design choices"): the module needs only os and
    sys. A module that has gone (the package removed, the .pth left behind) must not
    make every start print an error, so its existence is checked first; one loaded
    already is left as it is."""
    return ("import os, sys; _f = %r; "
            "_m = os.path.exists(_f) and 'epochfs_autohook' not in sys.modules and "
            "type(sys)('epochfs_autohook'); "
            "_m and (setattr(_m, '__file__', _f), sys.modules.__setitem__('epochfs_autohook', _m), "
            "exec(compile(open(_f, 'rb').read(), _f, 'exec'), _m.__dict__), "
            "_m.register('site hook'))\n") % module_file


class _AfterImport:
    """A meta path finder that finds nothing itself: it wraps the loader of
    torch.utils.data.dataloader so that epochfs.hook installs itself right after that
    module has run."""

    def __init__(self, origin):
        self.origin = origin

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

            def exec_and_hook(module, exec_module=exec_module, origin=self.origin):
                exec_module(module)
                try:
                    _make_package_importable()
                    import epochfs.hook
                    epochfs.hook.install()
                except Exception as e:  # never break the script's start
                    sys.stderr.write(f"epochfs ({origin}): the DataLoader hook is not installed: {e!r}\n")

            spec.loader.exec_module = exec_and_hook
            return spec
        return None


def _make_package_importable():
    """The epochfs package lives beside this module (dist-packages, or the build tree's
    loader/python): where this module was loaded by path, that folder may not be on the
    path."""
    import importlib.util
    if importlib.util.find_spec("epochfs") is None:
        sys.path.append(os.path.dirname(os.path.abspath(__file__)))


def register(origin="site hook"):
    """Installs epochfs.hook when the script imports torch.utils.data (idempotent)."""
    if os.environ.get("EPOCHFS_RUN_HOOK", "1") == "0" or registered():
        return
    sys.meta_path.insert(0, _AfterImport(origin))


def registered():
    return any(isinstance(f, _AfterImport) for f in sys.meta_path)


# ---- enable / disable / status ---------------------------------------------------------

def _site_dir(args):
    if args.dir:
        return args.dir
    if args.user:
        import site
        return site.getusersitepackages()
    import sysconfig
    return sysconfig.get_paths()["purelib"]


def _fresh_interpreter_registers():
    """Whether a new start of this interpreter registers the hook (the .pth ran and
    found this module), as the scripts it starts will see it."""
    import subprocess
    env = {k: v for k, v in os.environ.items() if k != "EPOCHFS_RUN_HOOK"}
    probe = ("import sys; print(any(type(f).__name__ == '_AfterImport' and "
             "type(f).__module__ == 'epochfs_autohook' for f in sys.meta_path))")
    r = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    return r.returncode == 0 and r.stdout.strip() == "True"


def main(argv=None):
    import argparse
    parser = argparse.ArgumentParser(
        prog="epochfs python-hook",
        description="Make unmodified torch DataLoader scripts publish their epoch order to "
                    "epochfs mounts (and skip isatty() on buffered binary opens), for every "
                    "script this Python starts, without `epochfs run`.")
    parser.add_argument("action", choices=("enable", "disable", "status"))
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true",
                       help="the user's site-packages instead of the interpreter's")
    where.add_argument("--dir", help="this site-packages folder")
    args = parser.parse_args(argv)
    folder = _site_dir(args)
    pth = os.path.join(folder, PTH_NAME)
    if args.action == "enable":
        try:
            os.makedirs(folder, exist_ok=True)
            tmp = pth + ".tmp"
            with open(tmp, "w") as f:
                f.write(pth_line(os.path.abspath(__file__)))
            os.chmod(tmp, 0o644)  # every user's Python reads it, whatever the umask
            os.replace(tmp, pth)
        except OSError as e:
            print(f"epochfs python-hook: cannot write {pth}: {e.strerror}"
                  + (" (run as root, or use --user)" if e.errno in (1, 13) else ""), file=sys.stderr)
            return 1
        print(f"enabled: {pth}")
    elif args.action == "disable":
        try:
            os.remove(pth)
            print(f"disabled: removed {pth}")
        except FileNotFoundError:
            print(f"not enabled: no {pth}")
        except OSError as e:
            print(f"epochfs python-hook: cannot remove {pth}: {e.strerror}", file=sys.stderr)
            return 1
    else:
        print(f"{pth}: {'present' if os.path.exists(pth) else 'absent'}")
    active = _fresh_interpreter_registers()
    print(f"{sys.executable} starts with the hook: {'yes' if active else 'no'}")
    if args.action == "enable" and not active:
        print(f"epochfs python-hook: the .pth is written, but a new {sys.executable} does not "
              f"register the hook: does it read {folder} (python -m site)?", file=sys.stderr)
        return 1
    if args.action == "disable" and active:
        print("epochfs python-hook: another .pth (or sitecustomize) still installs it for "
              f"{sys.executable}: see `python -m site` for its site folders", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
