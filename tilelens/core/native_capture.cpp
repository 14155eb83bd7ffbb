// TileLens's optional compiled capture: `compiled_templates.capture` in C++, reading tensors through
// libtorch's own accessors instead of eight Python calls per tensor (issue 15).
//
// Built and loaded by tilelens/core/native.py (never imported by name; never required). It exports
//
//   capture(plan, bound, last) -> (sig, values) | None
//
// with exactly the meaning of the Python `compiled_templates.capture(plan, bound)`: `values` is the same
// list (per runtime tensor its storage offset, storage pointer and storage bytes; per int/float/bool scalar
// the object itself), and `sig` is a `Sig`: equal (==, hash) to another Sig exactly when the Python
// signatures of the two launches are equal (every tensor's dtype, shape, strides and device; every scalar's
// type; None; every constexpr's type and value). When it equals `last`, `last` itself is returned, so the
// router's check of a kernel's last template is one identity test. None: an argument of another kind (a
// tensor subclass, a wrapper, an object constexpr, a missing name), or a tensor libtorch will not describe
// (no storage, not strided, symbolic sizes): the caller takes the untemplated path.
//
// Invariants: nothing here changes a tensor or keeps one (a Sig holds only integers and the constexpr
// values, which are ints, floats, bools, strs or None); every Python error and C++ exception is caught and
// turned into None; the GIL is held throughout.

#include <Python.h>

#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace {

PyObject* g_tensor_type = nullptr;  // torch.Tensor (exact type only, as `type(v) is torch.Tensor`)
PyObject* g_runtime_name = nullptr;  // "runtime_names"
PyObject* g_constexpr_name = nullptr;  // "constexpr_names"

enum Tag : int64_t { TENSOR = 1, INT = 2, FLOAT = 3, BOOL = 4, NONE = 5, CONSTEXPR = 6 };

// A launch's signature: `n` integers (tags, dtypes, devices, shapes, strides, constexpr type codes) and the
// constexpr values in order.
struct Sig {
  PyObject_VAR_HEAD
  PyObject* values;  // tuple of the constexpr values
  Py_hash_t hash;
  int64_t code[1];
};

PyTypeObject SigType = {PyVarObject_HEAD_INIT(nullptr, 0)};

Py_hash_t mix(Py_hash_t h, uint64_t v) {
  uint64_t x = static_cast<uint64_t>(h) ^ (v + 0x9e3779b97f4a7c15ULL + (static_cast<uint64_t>(h) << 6) +
                                           (static_cast<uint64_t>(h) >> 2));
  return static_cast<Py_hash_t>(x);
}

void sig_dealloc(PyObject* self) {
  Py_XDECREF(reinterpret_cast<Sig*>(self)->values);
  Py_TYPE(self)->tp_free(self);
}

Py_hash_t sig_hash(PyObject* self) { return reinterpret_cast<Sig*>(self)->hash; }

// Equal codes, and constexpr values equal as Python compares them (identity first).
int sig_equal(Sig* a, Sig* b) {
  if (a == b) return 1;
  if (Py_SIZE(a) != Py_SIZE(b) || a->hash != b->hash) return 0;
  if (std::memcmp(a->code, b->code, sizeof(int64_t) * Py_SIZE(a)) != 0) return 0;
  return PyObject_RichCompareBool(a->values, b->values, Py_EQ);
}

PyObject* sig_richcompare(PyObject* a, PyObject* b, int op) {
  if ((op != Py_EQ && op != Py_NE) || Py_TYPE(a) != &SigType || Py_TYPE(b) != &SigType) {
    Py_RETURN_NOTIMPLEMENTED;
  }
  int eq = sig_equal(reinterpret_cast<Sig*>(a), reinterpret_cast<Sig*>(b));
  if (eq < 0) return nullptr;
  if ((op == Py_EQ) == (eq == 1)) Py_RETURN_TRUE;
  Py_RETURN_FALSE;
}

PyObject* sig_repr(PyObject* self) {
  Sig* s = reinterpret_cast<Sig*>(self);
  return PyUnicode_FromFormat("<Sig of %zd codes, constexprs %R>", Py_SIZE(s), s->values);
}

// The encoded signature of one launch, built on the stack of the call.
struct Scratch {
  std::vector<int64_t> code;
  std::vector<PyObject*> constexprs;  // borrowed from `bound` for the duration of the call
};

int constexpr_code(PyObject* v) {
  PyTypeObject* t = Py_TYPE(v);
  if (t == &PyLong_Type) return 1;
  if (t == &PyFloat_Type) return 2;
  if (t == &PyBool_Type) return 3;
  if (t == &PyUnicode_Type) return 4;
  if (v == Py_None) return 5;
  return 0;
}

// Appends one tensor; false: libtorch will not describe it (no storage, not strided, symbolic sizes, an
// exception) or a Python error (cleared by the caller).
bool add_tensor(PyObject* v, Scratch& s, PyObject* values) noexcept try {
  const at::Tensor& tensor = THPVariable_Unpack(v);
  if (!tensor.defined() || tensor.layout() != c10::kStrided) return false;
  c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  if (!impl->has_storage() || impl->has_symbolic_sizes_strides()) return false;
  c10::IntArrayRef sizes = tensor.sizes();
  c10::IntArrayRef strides = tensor.strides();
  c10::Device device = tensor.device();
  s.code.push_back(TENSOR);
  s.code.push_back(static_cast<int64_t>(tensor.scalar_type()));
  s.code.push_back(static_cast<int64_t>(device.type()));
  s.code.push_back(static_cast<int64_t>(device.index()));
  s.code.push_back(static_cast<int64_t>(sizes.size()));
  s.code.insert(s.code.end(), sizes.begin(), sizes.end());
  s.code.insert(s.code.end(), strides.begin(), strides.end());
  const c10::Storage& storage = impl->storage();
  PyObject* offset = PyLong_FromLongLong(impl->storage_offset());
  PyObject* pointer = PyLong_FromVoidPtr(const_cast<void*>(storage.data()));
  PyObject* nbytes = PyLong_FromSize_t(storage.nbytes());
  bool ok = offset && pointer && nbytes && PyList_Append(values, offset) == 0 &&
            PyList_Append(values, pointer) == 0 && PyList_Append(values, nbytes) == 0;
  Py_XDECREF(offset);
  Py_XDECREF(pointer);
  Py_XDECREF(nbytes);
  return ok;
} catch (...) {
  return false;
}

// Appends one runtime argument; false: not a kind a template can hold.
bool add_runtime(PyObject* v, Scratch& s, PyObject* values) {
  PyTypeObject* t = Py_TYPE(v);
  if (reinterpret_cast<PyObject*>(t) == g_tensor_type) return add_tensor(v, s, values);
  if (t == &PyLong_Type || t == &PyFloat_Type || t == &PyBool_Type) {
    s.code.push_back(t == &PyLong_Type ? INT : t == &PyFloat_Type ? FLOAT : BOOL);
    return PyList_Append(values, v) == 0;
  }
  if (v == Py_None) {
    s.code.push_back(NONE);
    return true;
  }
  return false;
}

// `last` when the scratch signature equals it; else a new Sig (nullptr and an exception on failure, or
// nullptr with no exception when a constexpr value cannot be compared or hashed).
PyObject* sig_of(Scratch& s, PyObject* last) {
  Py_ssize_t n = static_cast<Py_ssize_t>(s.code.size());
  Py_ssize_t m = static_cast<Py_ssize_t>(s.constexprs.size());
  if (last != nullptr && Py_TYPE(last) == &SigType) {
    Sig* l = reinterpret_cast<Sig*>(last);
    if (Py_SIZE(l) == n && PyTuple_GET_SIZE(l->values) == m &&
        std::memcmp(l->code, s.code.data(), sizeof(int64_t) * n) == 0) {
      bool same = true;
      for (Py_ssize_t i = 0; i < m && same; ++i) {
        int eq = PyObject_RichCompareBool(s.constexprs[i], PyTuple_GET_ITEM(l->values, i), Py_EQ);
        if (eq < 0) {
          PyErr_Clear();
          return nullptr;
        }
        same = eq == 1;
      }
      if (same) {
        Py_INCREF(last);
        return last;
      }
    }
  }
  Sig* sig = PyObject_NewVar(Sig, &SigType, n);
  if (sig == nullptr) return nullptr;
  sig->values = PyTuple_New(m);
  if (sig->values == nullptr) {
    Py_DECREF(sig);
    return nullptr;
  }
  if (n) std::memcpy(sig->code, s.code.data(), sizeof(int64_t) * n);
  Py_hash_t h = static_cast<Py_hash_t>(n);
  for (Py_ssize_t i = 0; i < n; ++i) h = mix(h, static_cast<uint64_t>(s.code[i]));
  for (Py_ssize_t i = 0; i < m; ++i) {
    PyObject* v = s.constexprs[i];
    Py_INCREF(v);
    PyTuple_SET_ITEM(sig->values, i, v);
    Py_hash_t vh = PyObject_Hash(v);
    if (vh == -1) {
      PyErr_Clear();
      Py_DECREF(sig);
      return nullptr;
    }
    h = mix(h, static_cast<uint64_t>(vh));
  }
  sig->hash = h == -1 ? -2 : h;
  return reinterpret_cast<PyObject*>(sig);
}

PyObject* names_of(PyObject* plan, PyObject* attr) {
  PyObject* names = PyObject_GetAttr(plan, attr);
  if (names != nullptr && !PyTuple_Check(names)) {
    Py_DECREF(names);
    PyErr_SetString(PyExc_TypeError, "a capture plan's names must be a tuple");
    return nullptr;
  }
  return names;
}

PyObject* capture_impl(PyObject* plan, PyObject* bound, PyObject* last) {
  if (!PyDict_Check(bound)) Py_RETURN_NONE;
  PyObject* runtime = names_of(plan, g_runtime_name);
  if (runtime == nullptr) return nullptr;
  PyObject* constexprs = names_of(plan, g_constexpr_name);
  if (constexprs == nullptr) {
    Py_DECREF(runtime);
    return nullptr;
  }
  thread_local Scratch s;
  s.code.clear();
  s.constexprs.clear();
  PyObject* values = PyList_New(0);
  PyObject* out = nullptr;
  bool ok = values != nullptr;
  for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(runtime); ++i) {
    PyObject* v = PyDict_GetItemWithError(bound, PyTuple_GET_ITEM(runtime, i));
    ok = v != nullptr && add_runtime(v, s, values);
  }
  for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(constexprs); ++i) {
    PyObject* v = PyDict_GetItemWithError(bound, PyTuple_GET_ITEM(constexprs, i));
    int code = v == nullptr ? 0 : constexpr_code(v);
    ok = code != 0;
    if (ok) {
      s.code.push_back(CONSTEXPR);
      s.code.push_back(code);
      s.constexprs.push_back(v);
    }
  }
  if (ok) {
    PyObject* sig = sig_of(s, last);
    if (sig != nullptr) {
      out = PyTuple_Pack(2, sig, values);
      Py_DECREF(sig);
    }
  }
  s.constexprs.clear();
  Py_XDECREF(values);
  Py_DECREF(runtime);
  Py_DECREF(constexprs);
  if (out == nullptr) {
    PyErr_Clear();  // not templatable, however it failed: the caller takes the untemplated path
    Py_RETURN_NONE;
  }
  return out;
}

PyObject* capture(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "capture(plan, bound, last) takes 3 arguments");
    return nullptr;
  }
  try {
    return capture_impl(args[0], args[1], args[2]);
  } catch (...) {  // a c10::Error from a tensor libtorch will not describe: not templatable
    PyErr_Clear();
    Py_RETURN_NONE;
  }
}

PyObject* setup(PyObject*, PyObject* tensor_type) {
  if (!PyType_Check(tensor_type)) {
    PyErr_SetString(PyExc_TypeError, "setup(torch.Tensor)");
    return nullptr;
  }
  Py_XDECREF(g_tensor_type);
  Py_INCREF(tensor_type);
  g_tensor_type = tensor_type;
  Py_RETURN_NONE;
}

PyMethodDef methods[] = {
    {"capture", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(capture)), METH_FASTCALL,
     "capture(plan, bound, last) -> (sig, values) | None"},
    {"setup", setup, METH_O, "setup(torch.Tensor): the tensor type captured"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tilelens_capture", "TileLens's compiled capture", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__tilelens_capture(void) {
  SigType.tp_name = "_tilelens_capture.Sig";
  SigType.tp_basicsize = sizeof(Sig) - sizeof(int64_t);
  SigType.tp_itemsize = sizeof(int64_t);
  SigType.tp_dealloc = sig_dealloc;
  SigType.tp_hash = sig_hash;
  SigType.tp_richcompare = sig_richcompare;
  SigType.tp_repr = sig_repr;
  SigType.tp_flags = Py_TPFLAGS_DEFAULT;
  SigType.tp_doc = "A launch's template signature (compiled_templates.capture).";
  if (PyType_Ready(&SigType) < 0) return nullptr;
  g_runtime_name = PyUnicode_InternFromString("runtime_names");
  g_constexpr_name = PyUnicode_InternFromString("constexpr_names");
  if (g_runtime_name == nullptr || g_constexpr_name == nullptr) return nullptr;
  PyObject* m = PyModule_Create(&module);
  if (m == nullptr) return nullptr;
  Py_INCREF(&SigType);
  if (PyModule_AddObject(m, "Sig", reinterpret_cast<PyObject*>(&SigType)) < 0) {
    Py_DECREF(&SigType);
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
