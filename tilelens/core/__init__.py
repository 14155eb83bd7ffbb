"""Capture: everything that runs while a program is recorded, in layers a module may import only to its left.

``compat`` (every Triton-version difference) and ``session`` (the running recording and test) are the floor;
then ``kernel`` (what a launch is) <- ``engine`` (the CPU interpreter engine) <- ``patches`` (the one module that
changes Triton's and the user's objects) <- ``interpreted`` | ``compiled`` (the two ways of recording, which never
import each other; only ``compiled`` imports ``native``) <- ``recording`` (the session a user enters).
``tests/unit/test_structure.py`` enforces the order. The capture side hands ``tilelens.records`` to the store.
"""
