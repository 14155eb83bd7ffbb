// TileLens's native accessor: a compiled launch's tensor metadata read through libtorch's public accessors.
//
// Reading a tensor's dtype, shape, strides, device, storage offset, storage pointer and storage size through
// torch's Python API costs eight calls; libtorch answers each in nanoseconds (docs/gpu-recording.md has the
// measurement). This module exports one function with exactly the meaning of the Python
// `tilelens.core.compiled.router.templates.capture`:
//
//   capture(plan, bound, last) -> (sig, values) | None
//
// `values`: per runtime tensor (in the plan's order) its storage offset, storage pointer and storage bytes;
// per exact int/float/bool scalar the object itself. `sig`: `(codes, constexprs)`, a bytes object of int64
// codes (per tensor its dtype, device, rank, sizes and strides; per scalar its type; None) and the tuple of the
// constexpr values, so two sigs are equal exactly when the Python signatures are. When it equals `last`,
// `last` itself is returned. None: an argument of another kind (a tensor subclass, an object constexpr, a
// missing name) or a tensor libtorch will not describe; the caller then takes the untemplated path.
//
// Invariants: only CPython's public C API and libtorch's public accessors (no CPython-internal struct); no
// tensor is changed or kept; every Python error and C++ exception is turned into None or a TypeError; the
// GIL is held throughout. Built by tilelens/core/native/__init__.py with torch.utils.cpp_extension.

#include <Python.h>

#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <string>

namespace {

PyObject* g_tensor_type = nullptr;  // torch.Tensor: exact type only, as the Python `type(v) is torch.Tensor`
PyObject* g_order = nullptr;        // "order"

enum Tag : int64_t { TENSOR = 1, INT = 2, FLOAT = 3, BOOL = 4, NONE = 5, CONSTEXPR = 6 };

// A constexpr's type code (0: not a kind a template can hold).
int64_t constexpr_code(PyObject* v) {
  if (PyBool_Check(v)) return 3;
  if (PyLong_CheckExact(v)) return 1;
  if (PyFloat_CheckExact(v)) return 2;
  if (PyUnicode_CheckExact(v)) return 4;
  if (v == Py_None) return 5;
  return 0;
}

struct Capture {
  std::string codes;
  PyObject* values;      // a new list, owned by the caller
  PyObject* constexprs;  // a new list, owned by the caller

  void put(int64_t x) { codes.append(reinterpret_cast<const char*>(&x), sizeof(x)); }

  bool append(PyObject* v) { return PyList_Append(values, v) == 0; }

  bool append_owned(PyObject* v) {
    bool ok = v != nullptr && append(v);
    Py_XDECREF(v);
    return ok;
  }

  // false: libtorch will not describe this tensor (no storage, not strided, symbolic sizes) or an error.
  bool tensor(PyObject* v) {
    const at::Tensor& t = THPVariable_Unpack(v);
    if (!t.defined() || t.layout() != c10::kStrided) return false;
    c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    if (!impl->has_storage() || impl->has_symbolic_sizes_strides()) return false;
    c10::Device device = t.device();
    put(TENSOR);
    put(static_cast<int64_t>(t.scalar_type()));
    put(static_cast<int64_t>(device.type()));
    put(static_cast<int64_t>(device.index()));
    put(static_cast<int64_t>(t.dim()));
    for (int64_t d : t.sizes()) put(d);
    for (int64_t d : t.strides()) put(d);
    const c10::Storage& storage = impl->storage();
    return append_owned(PyLong_FromLongLong(impl->storage_offset())) &&
           append_owned(PyLong_FromVoidPtr(const_cast<void*>(storage.data()))) &&
           append_owned(PyLong_FromSize_t(storage.nbytes()));
  }

  // One runtime argument; false: not a kind a template can hold.
  bool runtime(PyObject* v) {
    if (reinterpret_cast<PyObject*>(Py_TYPE(v)) == g_tensor_type) return tensor(v);
    if (v == Py_None) {
      put(NONE);
      return true;
    }
    if (PyBool_Check(v)) put(BOOL);
    else if (PyLong_CheckExact(v)) put(INT);
    else if (PyFloat_CheckExact(v)) put(FLOAT);
    else return false;
    return append(v);
  }

  bool constexpr_value(PyObject* v) {
    int64_t code = constexpr_code(v);
    if (code == 0) return false;
    put(CONSTEXPR);
    put(code);
    return PyList_Append(constexprs, v) == 0;
  }
};

// `plan.order` is `(names, flags)`: every parameter's name in order, and a byte per parameter (1: constexpr).
// Runtime arguments come first in the signature, then constexprs, as in the Python capture.
PyObject* capture_impl(PyObject* plan, PyObject* bound, PyObject* last) {
  if (!PyDict_Check(bound)) Py_RETURN_NONE;
  PyObject* order = PyObject_GetAttr(plan, g_order);
  if (order == nullptr) return nullptr;
  PyObject* names = PyTuple_Check(order) && PyTuple_GET_SIZE(order) == 2 ? PyTuple_GET_ITEM(order, 0) : nullptr;
  PyObject* flags = names != nullptr ? PyTuple_GET_ITEM(order, 1) : nullptr;
  if (names == nullptr || !PyTuple_Check(names) || !PyBytes_Check(flags) ||
      PyBytes_GET_SIZE(flags) != PyTuple_GET_SIZE(names)) {
    Py_DECREF(order);
    PyErr_SetString(PyExc_TypeError, "a capture plan's order must be (names tuple, flags bytes)");
    return nullptr;
  }
  Capture c{std::string(), PyList_New(0), PyList_New(0)};
  PyObject* result = nullptr;
  bool ok = c.values != nullptr && c.constexprs != nullptr;
  const char* constexpr_flags = PyBytes_AS_STRING(flags);
  Py_ssize_t n = PyTuple_GET_SIZE(names);
  for (int pass = 0; ok && pass < 2; ++pass) {  // runtime arguments, then constexprs
    for (Py_ssize_t i = 0; ok && i < n; ++i) {
      if ((constexpr_flags[i] != 0) != (pass == 1)) continue;
      PyObject* v = PyDict_GetItemWithError(bound, PyTuple_GET_ITEM(names, i));  // borrowed
      ok = v != nullptr && (pass == 0 ? c.runtime(v) : c.constexpr_value(v));
    }
  }
  if (ok) {
    PyObject* codes = PyBytes_FromStringAndSize(c.codes.data(), static_cast<Py_ssize_t>(c.codes.size()));
    PyObject* constexprs = PyList_AsTuple(c.constexprs);
    PyObject* sig = codes != nullptr && constexprs != nullptr ? PyTuple_Pack(2, codes, constexprs) : nullptr;
    Py_XDECREF(codes);
    Py_XDECREF(constexprs);
    int same = sig != nullptr && last != Py_None ? PyObject_RichCompareBool(sig, last, Py_EQ) : 0;
    if (same == 1) Py_SETREF(sig, Py_NewRef(last));
    if (sig != nullptr && same >= 0) result = PyTuple_Pack(2, sig, c.values);
    Py_XDECREF(sig);
  }
  Py_DECREF(order);
  Py_XDECREF(c.values);
  Py_XDECREF(c.constexprs);
  if (result == nullptr) {
    PyErr_Clear();  // not templatable, however that was found
    Py_RETURN_NONE;
  }
  return result;
}

PyObject* capture(PyObject*, PyObject* args) {
  PyObject *plan, *bound, *last;
  if (!PyArg_UnpackTuple(args, "capture", 3, 3, &plan, &bound, &last)) return nullptr;
  try {
    return capture_impl(plan, bound, last);
  } catch (...) {  // a c10::Error from a tensor libtorch will not describe: not templatable
    PyErr_Clear();
    Py_RETURN_NONE;
  }
}

PyObject* setup(PyObject*, PyObject* tensor_type) {
  Py_XSETREF(g_tensor_type, Py_NewRef(tensor_type));
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"setup", setup, METH_O, "setup(torch.Tensor): the exact tensor type capture reads."},
    {"capture", capture, METH_VARARGS, "capture(plan, bound, last) -> (sig, values) | None"},
    {nullptr, nullptr, 0, nullptr},
};

#define TL_STR2(x) #x
#define TL_STR(x) TL_STR2(x)

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, TL_STR(TORCH_EXTENSION_NAME), nullptr, -1, methods,
                          nullptr,               nullptr,                      nullptr, nullptr};

}  // namespace

#define TL_INIT2(name) PyInit_##name
#define TL_INIT(name) TL_INIT2(name)

PyMODINIT_FUNC TL_INIT(TORCH_EXTENSION_NAME)(void) {
  g_order = PyUnicode_InternFromString("order");
  if (g_order == nullptr) return nullptr;
  return PyModule_Create(&module_def);
}
