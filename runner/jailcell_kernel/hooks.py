"""Import hooks: a meta path finder's way to patch a module the moment it
is imported (pyplot's show, IPython's display, getpass and pdb), without
the kernel importing it itself."""

import sys


class _PatchingLoader:
    """Wraps a module's real loader to patch the module right after it
    runs (pyplot's show, IPython's display, getpass and pdb)."""

    def __init__(self, inner, after):
        self._inner = inner
        self._after = after

    def create_module(self, spec):
        create = getattr(self._inner, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        self._inner.exec_module(module)
        self._after(module)

    def __getattr__(self, name):
        if name == "_inner":
            raise AttributeError(name)  # not set yet (copy, pickle): no recursion
        return getattr(self._inner, name)  # get_source, is_package, ...


def _spec_then(hook, name, path, target, after):
    """The spec the other finders of sys.meta_path give for name, with its
    loader wrapped to call after(module) once the module has run; None if
    none of them finds it. hook is the calling finder, skipped."""
    for finder in sys.meta_path:
        if finder is hook or not hasattr(finder, "find_spec"):
            continue
        spec = finder.find_spec(name, path, target)
        if spec is not None:
            break
    else:
        return None
    if spec.loader is not None and hasattr(spec.loader, "exec_module"):
        spec.loader = _PatchingLoader(spec.loader, after)
    return spec
