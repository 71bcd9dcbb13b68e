# What lagd/state/apply.py uses of CPython that Cython's own declarations lack (read by Cython only,
# beside the .py it augments; hatch_build.py copies it with the source).
cdef extern from "Python.h":
    void PyObject_GC_UnTrack(object op)
