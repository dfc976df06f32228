"""gpujob's start-up hook for the Python processes of a job (standard library only, 3.8+).

The agent puts this folder first on PYTHONPATH for the run command (not with
``runtime: {auto: false}``). Python's ``site`` imports the first ``sitecustomize`` it finds,
so this one registers an import finder, then runs the next one on ``sys.path`` itself (an
image's or a virtualenv's own). The finder acts only when ``transformers.trainer`` or
Lightning's trainer module is imported: then ``gpujob_autohook`` (imported only then) adds
gpujob's stop callback to every Trainer created. Other scripts pay one dictionary lookup per
import and nothing else; this file imports only ``os``, ``sys`` and ``importlib.machinery``
(type comments, no typing).
"""

import os
import sys


def _chain_next_sitecustomize() -> None:
    """Run the ``sitecustomize`` that this one shadows, if any (as ``site`` would have)."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    after = []
    seen_here = False
    for entry in sys.path:
        if os.path.abspath(entry or os.getcwd()) == here:
            seen_here = True
        elif seen_here:
            after.append(entry)
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", after)
    if spec is None or spec.loader is None or spec.origin == os.path.abspath(__file__):
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # site.py's own wording for a failing sitecustomize
        sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n%s: %s\n"
                         % (type(e).__name__, e))
    globals()["chained"] = module


# module being imported -> what gpujob_autohook.patch_module adds to its Trainer
TARGETS = {
    "transformers.trainer": "hf",
    "lightning.pytorch.trainer.trainer": "lightning.pytorch",
    "pytorch_lightning.trainer.trainer": "pytorch_lightning",
}


class PatchingLoader(object):
    """The real loader, then the patch; everything else is the real loader's."""

    def __init__(self, real, kind):  # type: (object, str) -> None
        self._real, self._kind = real, kind

    def create_module(self, spec):  # type: (object) -> object
        return self._real.create_module(spec)

    def exec_module(self, module):  # type: (object) -> None
        self._real.exec_module(module)
        try:
            import gpujob_autohook  # only now: nothing for scripts that never import a Trainer

            gpujob_autohook.patch_module(self._kind, module)
        except Exception as e:  # never break the user's import
            sys.stderr.write("[gpujob] automatic stop hook not installed ({}): {}: {}\n".format(
                getattr(module, "__name__", "?"), type(e).__name__, e))

    def __getattr__(self, name):  # type: (str) -> object
        if name == "_real":  # not set yet (a copy being built): no recursion
            raise AttributeError(name)
        return getattr(self._real, name)  # get_source, get_resource_reader, ...


class Finder(object):
    """A sys.meta_path finder that finds nothing itself: it wraps the loader of the few
    Trainer modules (one dictionary lookup for every other import)."""

    def find_spec(self, fullname, path=None, target=None):  # type: (str, object, object) -> object
        kind = TARGETS.get(fullname)
        if kind is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None:
            spec.loader = PatchingLoader(spec.loader, kind)
        return spec


def install():  # type: () -> None
    """Put the finder first on sys.meta_path (once); patch Trainer modules already imported."""
    if any(type(f).__name__ == "Finder" and getattr(f, "gpujob", False) for f in sys.meta_path):
        return
    finder = Finder()
    finder.gpujob = True
    sys.meta_path.insert(0, finder)
    loaded = [name for name in TARGETS if name in sys.modules]
    if loaded:
        import gpujob_autohook

        for name in loaded:
            gpujob_autohook.patch_module(TARGETS[name], sys.modules[name])


install()
_chain_next_sitecustomize()
