"""gpujob's start-up hook for the Python processes of a job (standard library only, 3.8+).

The agent puts this folder first on PYTHONPATH for the run command (not with
``runtime: {auto: false}``). Python's ``site`` imports the first ``sitecustomize`` it finds,
so this one runs the next one on ``sys.path`` itself (an image's or a virtualenv's own), then
registers an import finder that acts only when ``transformers.trainer`` or Lightning's
trainer module is imported: it then adds gpujob's stop callback to every Trainer created
(``gpujob_autohook``). Other scripts pay one dictionary lookup per import and nothing else.
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


def _install() -> None:
    import gpujob_autohook

    gpujob_autohook.install()
    _chain_next_sitecustomize()


_install()
