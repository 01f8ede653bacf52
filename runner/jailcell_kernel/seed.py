"""Reseeding what a process seeded once at import: called for the host's
Reseed ping (runner.Conn.Reseed) after a restore from a template."""

import os
import sys


def _reseed():
    """New seeds, from this kernel's own os.urandom, for every generator
    seeded once at import. A kernel restored from a template checkpoint
    (session/template.go) would otherwise draw the same numbers as every
    other session restored from it, as a VM restored from one snapshot
    would. Only modules already imported are touched: the others seed
    themselves when first imported. The str hash secret cannot be changed
    in a running interpreter (SECURITY.md)."""
    import random

    random.seed()
    tf = sys.modules.get("tempfile")
    if tf is not None:
        tf._name_sequence = None  # rebuilt, with a new Random, on next use
    nprand = sys.modules.get("numpy.random")
    if nprand is not None:
        nprand.seed()
    mp = sys.modules.get("multiprocessing.process")
    if mp is not None:
        mp.current_process().authkey = mp.AuthenticationString(os.urandom(32))
