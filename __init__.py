"""The root of a clone of the ascend_kv repository, which is not the package: that is ``ascend_kv/`` inside.

Python imports this file as ``ascend_kv`` when the folder holding a clone named ``ascend_kv`` comes first
on ``sys.path`` (a script run from that folder, or that folder as the current one): the clone shadows the
package. Rather than be an empty package, the clone then becomes the package it holds, as if it were
installed. Imported under any other name (a clone named otherwise, or a test collector), it does nothing.
"""

if __name__ == "ascend_kv":
    import os as _os

    __path__[:] = [_os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "ascend_kv")]  # noqa: F821
    __file__ = _os.path.join(__path__[0], "__init__.py")  # noqa: F821
    with open(__file__, encoding="utf-8") as _source:
        exec(compile(_source.read(), __file__, "exec"))  # the package's __init__, in this module
