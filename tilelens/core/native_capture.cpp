// TileLens's optional compiled capture: `compiled_templates.capture` in C++, reading tensors through
// libtorch's own accessors instead of eight Python calls per tensor, and the steady launch built on it (issue 15).
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
// It also exports `Launcher` and `GridProbe`, the steady launch of a compiled recording, `LaunchBatch`, where
// the launcher packs steady launches for the writer process (described where they are defined, below), and,
// from native_calls.cpp, `Intercept` and `Tuner` (the calls around a launch).
//
// Invariants: nothing here changes a tensor or keeps one (a Sig holds only integers and the constexpr
// values, which are ints, floats, bools, strs or None); every Python error and C++ exception in `capture` is
// caught and turned into None (the launcher passes on exactly the exceptions the Python router would); the
// GIL is held throughout.

#include <Python.h>

#include <torch/csrc/autograd/python_variable.h>

#include <marshal.h>
#include <structmember.h>

#include "native_common.h"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <initializer_list>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#if defined(__linux__)
#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>
#endif

namespace {

using tilelens_native::call_n;
using tilelens_native::caller_pushed;
using tilelens_native::CallerFrame;
using tilelens_native::Ref;

PyObject* g_tensor_type = nullptr;  // torch.Tensor (exact type only, as `type(v) is torch.Tensor`)
PyObject* g_runtime_name = nullptr;  // "runtime_names"
PyObject* g_constexpr_name = nullptr;  // "constexpr_names"
PyObject* g_order_name = nullptr;  // "order"
// The slots of `compiled_kernel.RoutedKernel` and `compiled_templates.FlatPlan` the launcher reads on every
// launch, at the offsets `configure` read from their member descriptors (as the frames' slots are read).
enum KernelSlot : int { K_JIT, K_LAST_TEMPLATE, K_FLAT_PLAN, K_OPTION_PLANS, NKERNEL };
const char* const kKernelSlots[NKERNEL] = {"jit", "last_template", "flat_plan", "option_plans"};
const char* const kPlanSlots[1] = {"order"};

// Where the launcher reads a kernel record's and a flat plan's slots (see `KernelSlot`); nullptr types: read
// by attribute (the module's `capture`, which has no launcher).
struct Slots {
  PyTypeObject* kernel = nullptr;
  Py_ssize_t kernel_at[NKERNEL] = {0, 0, 0, 0};
  PyTypeObject* plan = nullptr;
  Py_ssize_t order_at = 0;
};

// A new reference to `obj.<name>`: the slot at `offset` when `obj` is of `type`, else by attribute (nullptr
// and an exception when it is unset or missing).
PyObject* slot_or_attr(PyObject* obj, PyTypeObject* type, Py_ssize_t offset, PyObject* name) {
  if (type != nullptr && Py_TYPE(obj) == type) {
    PyObject* value = *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(obj) + offset);
    if (value != nullptr) return Py_NewRef(value);
  }
  return PyObject_GetAttr(obj, name);
}

// launch_pack.py's MARK, HEAD.size and BATCH_MARK (keep in step).
constexpr int kPackMark = 0;
constexpr Py_ssize_t kPackHead = 60;
constexpr int kBatchMark = 1;

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

// A vector whose first `N` items live in the object (on the caller's stack), the rest on the heap.
template <typename T, size_t N>
struct SmallVec {
  T local[N];
  std::vector<T> heap;
  size_t count = 0;

  void push_back(T v) {
    if (__builtin_expect(count < N, 1)) {  // then nothing is on the heap yet
      local[count++] = v;
      return;
    }
    grow(v);
  }
  __attribute__((noinline, cold)) void grow(T v) {
    if (count == N) heap.assign(local, local + N);
    heap.push_back(v);
    ++count;
  }
  const T* data() const { return count > N ? heap.data() : local; }
  void clear() {
    count = 0;
    heap.clear();
  }
  size_t size() const { return count; }
  T operator[](size_t i) const { return data()[i]; }
};

// The encoded signature of one launch, built on the stack of its call (a garbage collection during the
// capture may run a finalizer that launches a kernel: nothing here is shared between calls).
struct Scratch {
  SmallVec<int64_t, 256> code;
  SmallVec<PyObject*, 64> constexprs;  // borrowed from `bound` for the duration of the call

  void clear() {
    code.clear();
    constexprs.clear();
  }
};

// A capture's values as machine words, in the packed item's terms (launch_pack.py): per value its format
// code ('q' int64, 'd' float64, '?' bool) and 8 bytes. `fits` is false when a value needs marshal (an int
// past 64 bits, more values than `kMax`): the caller then captures into a list.
struct Words {
  static constexpr Py_ssize_t kMax = 512;
  Py_ssize_t n = 0;
  Py_ssize_t bytes = 0;  // of the packed values: 1 a bool, 8 the rest
  bool fits = true;
  char codes[kMax];
  uint64_t words[kMax];

  void add(char code, uint64_t word) {
    if (n == kMax) {
      fits = false;
      return;
    }
    codes[n] = code;
    words[n++] = word;
    bytes += code == '?' ? 1 : 8;
  }
};

// An exact int that fits in 64 bits, into `out`; false (no exception) otherwise.
bool int64_of(PyObject* v, int64_t& out) {
  if (!PyLong_CheckExact(v)) return false;
  if (tilelens_native::compact_int(v, out)) return true;
  int overflow = 0;
  long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
  if (overflow != 0 || (x == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    return false;
  }
  out = static_cast<int64_t>(x);
  return true;
}

// Where a capture puts its values: appended to a Python list (`capture`'s result), or as `Words`.
struct Values {
  PyObject* list = nullptr;  // borrowed
  Words* words = nullptr;

  // Back to no values.
  void clear() {
    if (words != nullptr) {
      words->n = words->bytes = 0;
      words->fits = true;
    } else if (list != nullptr) {
      PyList_SetSlice(list, 0, PyList_GET_SIZE(list), nullptr);
    }
  }

  bool tensor(int64_t offset, const void* pointer, size_t nbytes) {
    if (words != nullptr) {
      uint64_t p = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(pointer));
      if (p > static_cast<uint64_t>(INT64_MAX) || nbytes > static_cast<size_t>(INT64_MAX)) words->fits = false;
      words->add('q', static_cast<uint64_t>(offset));
      words->add('q', p);
      words->add('q', static_cast<uint64_t>(nbytes));
      return true;
    }
    PyObject* o = PyLong_FromLongLong(offset);
    PyObject* q = PyLong_FromVoidPtr(const_cast<void*>(pointer));
    PyObject* b = PyLong_FromSize_t(nbytes);
    bool ok = o && q && b && PyList_Append(list, o) == 0 && PyList_Append(list, q) == 0 &&
              PyList_Append(list, b) == 0;
    Py_XDECREF(o);
    Py_XDECREF(q);
    Py_XDECREF(b);
    return ok;
  }

  // An exact int, float or bool.
  bool scalar(PyObject* v) {
    if (words == nullptr) return PyList_Append(list, v) == 0;
    if (PyBool_Check(v)) {
      words->add('?', v == Py_True ? 1 : 0);
    } else if (PyFloat_CheckExact(v)) {
      double d = PyFloat_AS_DOUBLE(v);
      uint64_t bits;
      std::memcpy(&bits, &d, sizeof(bits));
      words->add('d', bits);
    } else {
      int64_t x = 0;
      if (!int64_of(v, x)) words->fits = false;
      words->add('q', static_cast<uint64_t>(x));
    }
    return true;
  }
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

// A launch's resolved grid (`resolve_grid`): three 64-bit ints when the program's grid gave a tuple of one
// to three of them (what `resolve_grid` makes of it: padded with 1s), the tuple made only when asked for;
// else the tuple the router resolved.
struct Grid {
  bool words = false;
  int64_t dims[3] = {1, 1, 1};
  Ref tuple;

  // Reads a tuple of 1-3 exact ints; false (no exception) for anything else.
  bool read(PyObject* value) {
    if (!PyTuple_CheckExact(value) || PyTuple_GET_SIZE(value) < 1 || PyTuple_GET_SIZE(value) > 3) return false;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(value); ++i)
      if (!int64_of(PyTuple_GET_ITEM(value, i), dims[i])) return false;
    return words = true;
  }
  // The resolved tuple, borrowed (nullptr and an exception on failure).
  PyObject* get() {
    if (!tuple && words) {
      tuple.reset(PyTuple_New(3));
      for (int i = 0; tuple && i < 3; ++i) {
        PyObject* d = PyLong_FromLongLong(dims[i]);
        if (d == nullptr) tuple.reset(nullptr);
        else PyTuple_SET_ITEM(tuple.get(), i, d);
      }
    }
    return tuple.get();
  }
};

// Appends one tensor; false: libtorch will not describe it (no storage, not strided, symbolic sizes, an
// exception) or a Python error (cleared by the caller).
bool add_tensor(PyObject* v, Scratch& s, Values& values) noexcept try {
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
  for (int64_t d : sizes) s.code.push_back(d);
  for (int64_t d : strides) s.code.push_back(d);
  const c10::Storage& storage = impl->storage();
  return values.tensor(impl->storage_offset(), storage.data(), storage.nbytes());
} catch (...) {
  return false;
}

// Appends one runtime argument; false: not a kind a template can hold.
bool add_runtime(PyObject* v, Scratch& s, Values& values) {
  PyTypeObject* t = Py_TYPE(v);
  if (reinterpret_cast<PyObject*>(t) == g_tensor_type) return add_tensor(v, s, values);
  if (t == &PyLong_Type || t == &PyFloat_Type || t == &PyBool_Type) {
    s.code.push_back(t == &PyLong_Type ? INT : t == &PyFloat_Type ? FLOAT : BOOL);
    return values.scalar(v);
  }
  if (v == Py_None) {
    s.code.push_back(NONE);
    return true;
  }
  return false;
}

// The signatures a capture compares its scratch with before it makes a Sig (borrowed; any object, only Sigs
// compared): those of the kernel's kept templates (`KeptTemplates`), each with the hash of its codes
// (`codes_hash`), so that only a Sig whose codes may equal the scratch's is read; then `last` (the kernel's last
// template's), whose codes' hash is not known. Nothing from the capture's start to its end runs Python code
// (the constexpr values compared are ints, floats, bools, strs or None): no other thread changes the kept
// templates meanwhile.
struct Candidates {
  static constexpr int kMax = 8;
  PyObject* sigs[kMax];
  uint64_t hashes[kMax];
  int n = 0;
  PyObject* last = nullptr;

  void add(PyObject* sig, uint64_t hash) {
    if (n < kMax) {
      sigs[n] = sig;
      hashes[n++] = hash;
    }
  }
};

// The hash of a signature's codes (not its constexpr values) that `Candidates` compares first: FNV-1a over
// the 64-bit codes (an xor and a multiply a code; the previous shift-and-add mix took ~11 instructions a code,
// and a launch has ~30-60 codes). Only a filter: an equal hash is followed by comparing the codes themselves.
uint64_t codes_hash(const int64_t* code, Py_ssize_t n) {
  uint64_t h = 0xcbf29ce484222325ULL ^ static_cast<uint64_t>(n);
  for (Py_ssize_t i = 0; i < n; ++i) h = (h ^ static_cast<uint64_t>(code[i])) * 0x100000001b3ULL;
  return h;
}

// 1: the scratch signature equals `last` (a Sig); 0: it does not, or a constexpr value cannot be compared
// (then `uncomparable`, the error cleared).
int scratch_equals(const Scratch& s, PyObject* last, bool& uncomparable) {
  if (Py_TYPE(last) != &SigType) return 0;
  Py_ssize_t n = static_cast<Py_ssize_t>(s.code.size());
  Py_ssize_t m = static_cast<Py_ssize_t>(s.constexprs.size());
  Sig* l = reinterpret_cast<Sig*>(last);
  if (Py_SIZE(l) != n || PyTuple_GET_SIZE(l->values) != m ||
      std::memcmp(l->code, s.code.data(), sizeof(int64_t) * n) != 0)
    return 0;
  for (Py_ssize_t i = 0; i < m; ++i) {
    int eq = PyObject_RichCompareBool(s.constexprs[i], PyTuple_GET_ITEM(l->values, i), Py_EQ);
    if (eq < 0) {
      PyErr_Clear();
      uncomparable = true;
      return 0;
    }
    if (eq == 0) return 0;
  }
  return 1;
}

// The first of `candidates` the scratch signature equals, itself (a new reference), so that a check of a
// template's signature is one identity test; else a new Sig (nullptr and an exception on failure, or nullptr
// with no exception when a constexpr value cannot be compared or hashed). `hash` is set to the codes' hash.
PyObject* sig_of(Scratch& s, const Candidates& candidates, uint64_t& hash) {
  Py_ssize_t n = static_cast<Py_ssize_t>(s.code.size());
  Py_ssize_t m = static_cast<Py_ssize_t>(s.constexprs.size());
  bool uncomparable = false;
  hash = codes_hash(s.code.data(), n);
  for (int i = 0; i < candidates.n; ++i) {
    if (candidates.hashes[i] != hash) continue;
    if (scratch_equals(s, candidates.sigs[i], uncomparable) == 1) return Py_NewRef(candidates.sigs[i]);
    if (uncomparable) return nullptr;
  }
  bool compared = false;  // `last` is one of the Sigs compared above
  for (int i = 0; i < candidates.n; ++i)
    compared |= candidates.sigs[i] == candidates.last && candidates.hashes[i] == hash;
  if (candidates.last != nullptr && !compared) {
    if (scratch_equals(s, candidates.last, uncomparable) == 1) return Py_NewRef(candidates.last);
    if (uncomparable) return nullptr;
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

// Reads `bound` in one walk when it holds exactly the parameters of `order` (`FlatPlan.order`: the names, and
// a byte per parameter, 1 for a constexpr), in that order, as Triton binds them. 1: read into `s` and
// `values`; -1: an argument of a kind a template cannot hold (any exception cleared); 0: the dict is not in
// that order (the caller clears `s` and `values` and reads name by name).
int walk(PyObject* order, PyObject* bound, Scratch& s, Values& values) {
  if (!PyTuple_CheckExact(order) || PyTuple_GET_SIZE(order) != 2) return 0;
  PyObject* names = PyTuple_GET_ITEM(order, 0);
  PyObject* flags = PyTuple_GET_ITEM(order, 1);
  if (!PyTuple_CheckExact(names) || !PyBytes_CheckExact(flags) || PyBytes_GET_SIZE(flags) != PyTuple_GET_SIZE(names) ||
      PyDict_GET_SIZE(bound) != PyTuple_GET_SIZE(names))
    return 0;
  const char* constexpr_flags = PyBytes_AS_STRING(flags);
  Py_ssize_t pos = 0, i = 0;
  PyObject *key, *v;
  while (PyDict_Next(bound, &pos, &key, &v)) {
    if (!tilelens_native::is_name(key, PyTuple_GET_ITEM(names, i))) return 0;
    if (!constexpr_flags[i++]) {
      if (!add_runtime(v, s, values)) {
        PyErr_Clear();
        return -1;
      }
    } else if (constexpr_code(v) != 0) {
      s.constexprs.push_back(v);
    } else {
      return -1;
    }
  }
  for (size_t j = 0; j < s.constexprs.size(); ++j) {
    s.code.push_back(CONSTEXPR);
    s.code.push_back(constexpr_code(s.constexprs[j]));
  }
  return 1;
}

// `capture_sig`'s reading of `bound` name by name (the plan's runtime names, then its constexpr names), when
// the dict is not in the plan's order or the plan has no order: into `s` and `values`, both emptied first. Cold:
// Triton binds every parameter in order.
TL_COLD PyObject* by_name(PyObject* plan, PyObject* bound, const Candidates& candidates, Values& values,
                          Scratch& s, uint64_t& hash) {
  s.clear();  // what the walk put there before it found the dict in another order
  values.clear();
  Ref runtime(names_of(plan, g_runtime_name));
  Ref constexprs(runtime ? names_of(plan, g_constexpr_name) : nullptr);
  if (!constexprs) return nullptr;
  bool ok = true;
  for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(runtime.get()); ++i) {
    PyObject* v = PyDict_GetItemWithError(bound, PyTuple_GET_ITEM(runtime.get(), i));
    ok = v != nullptr && add_runtime(v, s, values);
  }
  for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(constexprs.get()); ++i) {
    PyObject* v = PyDict_GetItemWithError(bound, PyTuple_GET_ITEM(constexprs.get(), i));
    int code = v == nullptr ? 0 : constexpr_code(v);
    ok = code != 0;
    if (ok) {
      s.code.push_back(CONSTEXPR);
      s.code.push_back(code);
      s.constexprs.push_back(v);
    }
  }
  PyObject* sig = ok ? sig_of(s, candidates, hash) : nullptr;
  if (sig == nullptr) PyErr_Clear();  // not templatable: the caller takes the untemplated path
  return sig;
}

// The launch's Sig (the first of `candidates` it equals, itself), its values put into `values` and its codes'
// hash into `hash`. nullptr with an exception: the plan has no name tuples; nullptr without one: the launch is
// not templatable, however that was found.
PyObject* capture_sig(PyObject* plan, PyObject* bound, const Candidates& candidates, Values& values,
                      const Slots& slots, uint64_t& hash) {
  if (!PyDict_Check(bound)) return nullptr;
  // Triton binds every parameter, in order: then the dict is read in one walk instead of a lookup a name.
  Ref order(slot_or_attr(plan, slots.plan, slots.order_at, g_order_name));
  if (!order) PyErr_Clear();  // a plan without it: name by name
  Scratch s;
  int walked = order ? walk(order.get(), bound, s, values) : 0;
  if (walked != 0) {
    PyObject* sig = walked == 1 ? sig_of(s, candidates, hash) : nullptr;
    if (sig == nullptr) PyErr_Clear();
    return sig;
  }
  return by_name(plan, bound, candidates, values, s, hash);
}

// `capture(plan, bound, last)`: (sig, values) or None.
PyObject* capture_impl(PyObject* plan, PyObject* bound, PyObject* last) {
  Ref list(PyList_New(0));
  if (!list) return nullptr;
  Values values{list.get(), nullptr};
  Candidates candidates;
  candidates.last = last;
  uint64_t hash = 0;
  Ref sig(capture_sig(plan, bound, candidates, values, Slots{}, hash));
  if (!sig) {
    if (PyErr_Occurred()) return nullptr;
    Py_RETURN_NONE;
  }
  return PyTuple_Pack(2, sig.get(), list.get());
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


// ---------------------------------------------------------------------------------------------------------
// The steady launch: `CompiledRouter.launch` for a launch like its kernel's last templated one.
//
// A `Launcher` is what interception calls for every `JITFunction` launch of a compiled recording. Configured
// (`configure(...)`, by `CompiledRouter.use_templates` when templated launches go to the writer process with
// this capture), it does in C++ what `launch`, `_launch_unsnapshotted` and `_templated` do in Python for a
// launch of a template already made, its kernel's last one (`RoutedKernel.last_template`) or another found in
// the templates table by its key: take `grid`/`warmup` out of the keyword arguments, run the launch through
// the router's runner with a `GridProbe` as its grid (timed as Python times it; when the runner is
// `compat.run_compiled`, Triton's own `JITFunction.run` as it was at `configure`, called directly), capture
// the bound arguments, check the template (the same Sig, templates table, compiled kernel, pytest node id,
// launch options and autotune/heuristics frames), resolve the grid and queue the flat launch (`flat`, or its
// steps done here from the writer's `flat_parts()`), then give the handle to the innermost tuner frame.
// Anything else is Python's:
//
// * before the launch (no kernel known yet, no template of it yet, no frame stack yet, a benchmark launch
//   inside a tuning): `rest(jit, args, grid, kwargs)`, the router's `_launch`;
// * after it (an exception, Triton did not bind, another template, anything unusual or any error while
//   checking): `after(k, jit, args, grid, probe, kwargs, stack, result, error, started, duration)`, the
//   router's `_after`, which decides from the same facts exactly as the Python path does (the capture is
//   pure, so its taking the arguments again changes nothing).
//
// Not configured (`configure()`), every call goes to `slow(jit, args, kwargs)`, the router's `launch`.
// Invariant: for every launch, the program sees what the Python path gives it (the runner's result, or its
// exception with its traceback), and the writer receives what the Python path would send.

struct Probe {
  PyObject_HEAD
  vectorcallfunc vectorcall;  // Triton's `grid(bound_args)` makes no argument tuple
  PyObject* grid;
  PyObject* bound;
  PyObject* value;
};

PyTypeObject ProbeType = {PyVarObject_HEAD_INIT(nullptr, 0)};

void probe_dealloc(PyObject* self) {
  Probe* p = reinterpret_cast<Probe*>(self);
  Py_XDECREF(p->grid);
  Py_XDECREF(p->bound);
  Py_XDECREF(p->value);
  Py_TYPE(self)->tp_free(self);
}

// `grid(bound)`: keeps `bound` and what the program's grid gives Triton (a callable grid called with it).
PyObject* probe_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  Probe* p = reinterpret_cast<Probe*>(self);
  if (PyVectorcall_NARGS(nargsf) != 1 || (kwnames != nullptr && PyTuple_GET_SIZE(kwnames))) {
    PyErr_SetString(PyExc_TypeError, "a grid probe takes the bound arguments only");
    return nullptr;
  }
  PyObject* bound = args[0];
  Py_INCREF(bound);
  Py_XSETREF(p->bound, bound);
  PyObject* value;
  if (PyCallable_Check(p->grid)) {
    value = PyObject_CallOneArg(p->grid, bound);
    if (value == nullptr) return nullptr;
  } else {
    value = p->grid;
    Py_INCREF(value);
  }
  Py_INCREF(value);
  Py_XSETREF(p->value, value);
  return value;
}

// A probe for `grid`, not called yet (nullptr and an exception on failure).
Probe* new_probe(PyObject* grid) {
  Probe* p = PyObject_New(Probe, &ProbeType);
  if (p == nullptr) return nullptr;
  p->vectorcall = probe_vectorcall;
  p->grid = Py_NewRef(grid);
  p->bound = nullptr;
  p->value = nullptr;
  return p;
}

PyObject* probe_new(PyTypeObject*, PyObject* args, PyObject*) {
  PyObject* grid;
  if (!PyArg_ParseTuple(args, "O:GridProbe", &grid)) return nullptr;
  return reinterpret_cast<PyObject*>(new_probe(grid));
}

PyMemberDef probe_members[] = {
    {"grid", T_OBJECT, offsetof(Probe, grid), READONLY, "the program's grid"},
    {"bound", T_OBJECT, offsetof(Probe, bound), READONLY, "the arguments Triton bound (None: not called)"},
    {"value", T_OBJECT, offsetof(Probe, value), READONLY, "what the grid gave Triton"},
    {nullptr, 0, 0, 0, nullptr}};

enum Field : int {
  REST, AFTER, KERNELS, METADATA, GRIDS, LOCAL, TEMPLATES, FLAT, RUNNER, GRID_OF, TESTID, THREAD, TIME, PERF,
  TRITON_RUN, QUEUE, FRAME_CLASS, KERNEL_CLASS, PLAN_CLASS, NFIELDS
};

// A configuration: the tuple `configure` was called with, its items named by `Field`. A launch holds a
// reference to the one it started with, so a `configure` meanwhile (another thread, while this launch's
// runner runs) never frees what the launch still reads.
struct Config {
  PyObject* t;
  PyObject* operator[](int i) const { return PyTuple_GET_ITEM(t, i); }
};

// The plan `options_words` or `options_match` last found in a kernel's `option_plans` under a call's keyword
// names (one per place of the launcher's `seen`, so per kernel unless two kernels' jits share a place). Triton's
// autotuner calls `fn.run(*args, **kwargs, **config.all_kwargs())`, which makes a new names tuple every
// launch: looking it up hashed it and compared it element by element (~300 instructions). The names are
// compared here by identity, as interned strings mostly are (`is_name`), against those kept. A plan is a
// function of the names alone (`RoutedKernel.options_key`), so a kept plan stays right after the dict is
// cleared and refilled; the caller looks again when the kept plan's names are not the very tuple the last
// template's key holds. Owned references, cleared with the launcher's configuration.
struct PlanCache {
  PyObject* kernel = nullptr;
  PyObject* plans = nullptr;
  PyObject* names = nullptr;
  PyObject* plan = nullptr;
  // Where each of the plan's kept names is among `names` (valid when `located`): the first equal name, as
  // `LaunchArgs::option_value` finds it.
  static constexpr Py_ssize_t kKept = 16;
  bool located = false;
  Py_ssize_t at[kKept];

  // The kept plan (borrowed) when `names` are the kept names of `kernel`'s `plans`, else nullptr.
  PyObject* find(PyObject* k, PyObject* d, PyObject* n) const {
    if (k != kernel || d != plans || names == nullptr || !PyTuple_CheckExact(n) ||
        PyTuple_GET_SIZE(n) != PyTuple_GET_SIZE(names))
      return nullptr;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(n); ++i)
      if (!tilelens_native::is_name(PyTuple_GET_ITEM(n, i), PyTuple_GET_ITEM(names, i))) return nullptr;
    return plan;
  }
  // The plan of `k`'s `d` under the names `n` as the call came (borrowed): the kept one, else the one `d`
  // files under them, kept from then; nullptr when `d` has none yet or it is not a 2-tuple (an exception set
  // only on an error). `was_kept`: it was the kept one.
  PyObject* plan_for(PyObject* k, PyObject* d, PyObject* n, bool& was_kept) {
    PyObject* p = find(k, d, n);
    was_kept = p != nullptr;
    if (p != nullptr) return p;
    p = PyDict_GetItemWithError(d, n);  // names: strs, so no Python code runs
    if (p == nullptr || !PyTuple_CheckExact(p) || PyTuple_GET_SIZE(p) != 2) return nullptr;
    keep(k, d, n, p);
    return plan;
  }
  // `plan` (a 2-tuple) kept for `k`'s `d` under the names `n` (a tuple), with where each kept name is in `n`.
  void keep(PyObject* k, PyObject* d, PyObject* n, PyObject* p) {
    Py_XSETREF(kernel, Py_NewRef(k));
    Py_XSETREF(plans, Py_NewRef(d));
    Py_XSETREF(names, Py_NewRef(n));
    Py_XSETREF(plan, Py_NewRef(p));
    PyObject* kept = PyTuple_GET_ITEM(p, 0);
    located = PyTuple_CheckExact(kept) && PyTuple_GET_SIZE(kept) <= kKept;
    for (Py_ssize_t j = 0; located && j < PyTuple_GET_SIZE(kept); ++j) {
      at[j] = -1;
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(n) && at[j] < 0; ++i)
        if (tilelens_native::is_name(PyTuple_GET_ITEM(n, i), PyTuple_GET_ITEM(kept, j))) at[j] = i;
      located = at[j] >= 0;
    }
  }
  void clear() {
    Py_CLEAR(kernel);
    Py_CLEAR(plans);
    Py_CLEAR(names);
    Py_CLEAR(plan);
  }
  int traverse(visitproc visit, void* arg) {
    Py_VISIT(kernel);
    Py_VISIT(plans);
    Py_VISIT(names);
    Py_VISIT(plan);
    return 0;
  }
};

// The metadata `steady` last found in the router's METADATA for a compiled kernel (owned: no other object
// takes `result`'s address meanwhile), while no clear of that dict was announced (`g_metadata_clears`, by
// `metadata_cleared()`). METADATA maps a compiled kernel's id to (kernel, metadata) and, while the kernel
// lives, keeps that entry until it is cleared: so the kept metadata is the entry's, without making the id
// and looking it up (~330 instructions a launch).
uint64_t g_metadata_clears = 0;

PyObject* metadata_cleared(PyObject*, PyObject*) {
  ++g_metadata_clears;
  Py_RETURN_NONE;
}

struct MetaCache {
  PyObject* result = nullptr;
  PyObject* metadata = nullptr;
  uint64_t clears = 0;

  // The kept metadata (borrowed) of `r`, or nullptr.
  PyObject* find(PyObject* r) const {
    return r == result && clears == g_metadata_clears ? metadata : nullptr;
  }
  void keep(PyObject* r, PyObject* m) {
    Py_XSETREF(result, Py_NewRef(r));
    Py_XSETREF(metadata, Py_NewRef(m));
    clears = g_metadata_clears;
  }
  void clear() {
    Py_CLEAR(result);
    Py_CLEAR(metadata);
  }
  int traverse(visitproc visit, void* arg) {
    Py_VISIT(result);
    Py_VISIT(metadata);
    return 0;
  }
};

// A launch's launch options and frames as machine words (`options_words`, `frames_words`), for the kept
// templates' test: two launches of one kernel whose words are equal have equal options keys
// (`RoutedKernel.options_key`) and frames keys (`compiled_frames.frame_key`). Each value is a tag and its
// payload: an exact int of 64 bits, a bool, a float other than NaN (its bits), None, a tuple (its size, then its
// items); an exact str by identity (`objs`: the kept template holds a reference, so the address is not reused
// while it is compared with). Equal words imply equal values (the converse need not hold: 1 and 1.0, two equal
// strs, differ here; such a launch is found by the slower tests). Anything else, or more than fits: not `ok`.
// Built on the launch's stack; reading it runs no Python code.
struct KeyWords {
  static constexpr int kWords = 64;
  static constexpr int kObjs = 8;
  enum Tag : uint64_t {
    W_NONE = 1, W_INT, W_BOOL, W_FLOAT, W_STR, W_TUPLE, W_NO_OPTIONS, W_OPTIONS, W_FRAMES, W_TUNER, W_HEURISTICS,
    W_TEXT
  };
  // An ASCII string this short is put as its text (`W_TEXT`, its length, its bytes in words), longer or other
  // strings by identity (`W_STR`): a tuning key's dtype names are made anew by each call of Triton's
  // autotuner, and equal texts are `==`.
  static constexpr Py_ssize_t kTextBytes = 32;
  uint64_t w[kWords];
  int n = 0;
  PyObject* objs[kObjs];  // borrowed from the launch's objects
  int nobjs = 0;
  bool ok = true;

  void put(uint64_t x) {
    if (n == kWords) ok = false;
    else w[n++] = x;
  }
  void obj(PyObject* o) {
    if (nobjs == kObjs) {
      ok = false;
      return;
    }
    objs[nobjs++] = o;
    put(static_cast<uint64_t>(reinterpret_cast<uintptr_t>(o)));
  }
  void value(PyObject* v, int depth = 0) {
    if (v == Py_None) {
      put(W_NONE);
    } else if (PyBool_Check(v)) {
      put(W_BOOL);
      put(v == Py_True);
    } else if (PyLong_CheckExact(v)) {
      int64_t x = 0;
      if (!int64_of(v, x)) ok = false;
      put(W_INT);
      put(static_cast<uint64_t>(x));
    } else if (PyFloat_CheckExact(v)) {
      double d = PyFloat_AS_DOUBLE(v);
      uint64_t bits;
      std::memcpy(&bits, &d, sizeof(bits));
      if (d != d) ok = false;  // NaN: equal bits, yet not `==`
      put(W_FLOAT);
      put(bits);
    } else if (PyUnicode_CheckExact(v) && PyUnicode_IS_COMPACT_ASCII(v) && PyUnicode_GET_LENGTH(v) <= kTextBytes) {
      Py_ssize_t length = PyUnicode_GET_LENGTH(v);
      const char* text = reinterpret_cast<const char*>(PyUnicode_DATA(v));
      put(W_TEXT);
      put(static_cast<uint64_t>(length));
      for (Py_ssize_t at = 0; at < length; at += 8) {
        uint64_t word = 0;
        std::memcpy(&word, text + at, static_cast<size_t>(length - at < 8 ? length - at : 8));
        put(word);
      }
    } else if (PyUnicode_CheckExact(v)) {
      put(W_STR);
      obj(v);
    } else if (PyTuple_CheckExact(v) && depth < 4) {
      put(W_TUPLE);
      put(static_cast<uint64_t>(PyTuple_GET_SIZE(v)));
      for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(v); ++i) value(PyTuple_GET_ITEM(v, i), depth + 1);
    } else {
      ok = false;
    }
  }
};

// One template as the launcher keeps it for the test in place: the key's parts as addresses (each held, so
// none is reused while kept) and the launch's options and frames as `KeyWords`. It was made from a launch the
// slower tests found to be of template `number` of the table `templates`: a launch with the same kernel, the
// same Sig object, metadata and node objects and equal words has an equal key.
struct KeptTemplate {
  PyObject* templates = nullptr;  // the templates table (`_templated`'s `templates`)
  PyObject* sig = nullptr;
  PyObject* metadata = nullptr;  // the compiled kernel's metadata (its id is the key's)
  PyObject* result = nullptr;    // the compiled kernel it was found for, while `clears` (`MetaCache`)
  uint64_t clears = 0;
  PyObject* node = nullptr;      // the pytest node id object
  PyObject* number = nullptr;    // the template's number
  int nwords = 0;
  int nobjs = 0;
  uint64_t words[KeyWords::kWords];
  PyObject* objs[KeyWords::kObjs];

  bool used() const { return templates != nullptr; }
  // Moves the references out into `out` (decremented by the caller, when nothing borrowed from here is read).
  int take(PyObject** out) {
    int k = 0;
    for (PyObject** p : {&templates, &sig, &metadata, &result, &node, &number}) {
      if (*p != nullptr) out[k++] = *p;
      *p = nullptr;
    }
    for (int i = 0; i < nobjs; ++i) out[k++] = objs[i];
    nobjs = nwords = 0;
    return k;
  }
  int traverse(visitproc visit, void* arg) {
    Py_VISIT(templates);
    Py_VISIT(sig);
    Py_VISIT(metadata);
    Py_VISIT(result);
    Py_VISIT(node);
    Py_VISIT(number);
    for (int i = 0; i < nobjs; ++i) Py_VISIT(objs[i]);
    return 0;
  }
};

// The templates a kernel's launches were lately found under, by the slower tests (its last template, the
// templates table), kept so that a kernel whose launches alternate between a few templates (one matmul at a
// layer's projection shapes, each with its own tuned config) finds each with a few compared words instead of
// reading the template's tuples and the objects in them (cold in the cache by then: ~4 k cycles a launch on
// the H200). `hashes` holds each kept Sig's `codes_hash`, so the capture reads only a Sig that may be the
// launch's. The least recently made is replaced when full. Owned references, cleared with the launcher's
// configuration; changed only by code that runs no Python code between its reads and its writes.
struct KeptTemplates {
  static constexpr int kKept = 8;
  PyObject* kernel = nullptr;  // the kernel record these are of
  uint64_t hashes[kKept] = {};
  KeptTemplate items[kKept];
  int next = 0;  // the place the next one takes

  // The number (borrowed) of the kept template of this launch's key (its Sig's codes' hash `hash`), or nullptr.
  PyObject* find(PyObject* k, PyObject* templates, PyObject* sig, uint64_t hash, PyObject* metadata,
                 PyObject* node, const KeyWords& words) const {
    if (k != kernel || !words.ok) return nullptr;
    for (int i = 0; i < kKept; ++i) {
      if (hashes[i] != hash) continue;
      const KeptTemplate& t = items[i];
      if (t.sig == sig && t.templates == templates && t.metadata == metadata && t.node == node &&
          t.nwords == words.n && std::memcmp(t.words, words.w, sizeof(uint64_t) * words.n) == 0)
        return t.number;
    }
    return nullptr;
  }
  static constexpr int kDropped = 6 + KeyWords::kObjs;  // the references one kept template holds

  // The metadata (borrowed) a kept template found for the compiled kernel `result`, while no clear of the
  // router's METADATA was announced since; else nullptr. Only templates of Sigs of codes' hash `hash` are read.
  PyObject* metadata_of(PyObject* k, PyObject* result, uint64_t hash) const {
    if (k != kernel) return nullptr;
    for (int i = 0; i < kKept; ++i) {
      const KeptTemplate& t = items[i];
      if (hashes[i] == hash && t.result == result && t.clears == g_metadata_clears && t.used()) return t.metadata;
    }
    return nullptr;
  }
  // Keeps the launch's key for template `number`. The references it replaces are moved into `dropped`, to be
  // decremented by the caller once nothing borrowed from here is read (a decrement may run Python code).
  void keep(PyObject* k, PyObject* templates, PyObject* sig, uint64_t hash, PyObject* metadata, PyObject* result,
            PyObject* node, PyObject* number, const KeyWords& words, std::vector<PyObject*>& dropped) {
    if (!words.ok) return;
    PyObject* out[kDropped];
    if (k != kernel) {
      for (KeptTemplate& t : items) {
        int got = t.take(out);
        dropped.insert(dropped.end(), out, out + got);
      }
      if (kernel != nullptr) dropped.push_back(kernel);
      kernel = Py_NewRef(k);
      next = 0;
    }
    KeptTemplate& t = items[next];
    hashes[next] = hash;
    next = (next + 1) % kKept;
    int got = t.take(out);
    dropped.insert(dropped.end(), out, out + got);
    t.templates = Py_NewRef(templates);
    t.sig = Py_NewRef(sig);
    t.metadata = Py_NewRef(metadata);
    t.result = Py_NewRef(result);
    t.clears = g_metadata_clears;
    t.node = Py_NewRef(node);
    t.number = Py_NewRef(number);
    t.nwords = words.n;
    std::memcpy(t.words, words.w, sizeof(uint64_t) * words.n);
    t.nobjs = words.nobjs;
    for (int i = 0; i < words.nobjs; ++i) t.objs[i] = Py_NewRef(words.objs[i]);
  }
  // The kept Sigs with their hashes, for the capture.
  void candidates(PyObject* k, Candidates& c) const {
    if (k != kernel) return;
    for (int i = 0; i < kKept; ++i)
      if (items[i].used()) c.add(items[i].sig, hashes[i]);
  }
  void clear() {
    for (KeptTemplate& t : items) {
      PyObject* out[kDropped];
      int got = t.take(out);
      for (int i = 0; i < got; ++i) Py_DECREF(out[i]);
    }
    Py_CLEAR(kernel);
    next = 0;
  }
  int traverse(visitproc visit, void* arg) {
    Py_VISIT(kernel);
    for (KeptTemplate& t : items)
      if (int r = t.traverse(visit, arg)) return r;
    return 0;
  }
};

// What the launcher keeps for the kernel at one place of its `seen`.
struct KernelKept {
  PlanCache plan;
  MetaCache metadata;
  KeptTemplates templates;

  void clear() {
    plan.clear();
    metadata.clear();
    templates.clear();
  }
  int traverse(visitproc visit, void* arg) {
    if (int r = plan.traverse(visit, arg)) return r;
    if (int r = templates.traverse(visit, arg)) return r;
    return metadata.traverse(visit, arg);
  }
};

struct Launcher {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* slow;        // the router's `launch`
  PyObject* config;      // a tuple of NFIELDS (`Config`), or nullptr: not configured
  Py_ssize_t steady;     // launches finished here
  Py_ssize_t fallbacks;  // launches given to Python (rest or after)
  Py_ssize_t frame_offsets[tilelens_native::NFRAME];  // of the configured frame class's slots
  Py_ssize_t kernel_offsets[NKERNEL];  // of the configured kernel class's slots (`kKernelSlots`)
  Py_ssize_t plan_offset;  // of the configured plan class's `order`
  tilelens_native::LocalDict local_dict, thread_dict;  // the configured LOCAL's and THREAD's, per thread
  bool native_clocks;  // TIME and PERF are `time.time` and `time.perf_counter`: read here (`clock_seconds`)
  // Kernel records found in KERNELS lately, by their jit's address (owned). A record holds its jit, so a
  // record whose jit slot is this launch's jit is that jit's record: the router replaces a record only for a
  // new jit at a freed one's address. Cleared with the configuration.
  static constexpr int kSeenBits = 6;
  static constexpr int kSeen = 1 << kSeenBits;
  PyObject* seen[kSeen];
  KernelKept kept[kSeen];  // for the kernel at the same place in `seen`
  Py_ssize_t plans_kept;  // launches whose options `options_words` read through a kept plan (a diagnostic)
  Py_ssize_t kept_hits;  // launches found among their kernel's kept templates (a diagnostic)
  PyObject* spare_probe;  // a Probe with empty slots that no one else holds, for the next launch (`ProbeLease`)
};

PyTypeObject LauncherType = {PyVarObject_HEAD_INIT(nullptr, 0)};

struct Names {
  PyObject *grid, *warmup, *stack, *bench_depth, *jit, *last_template, *flat_plan, *options_key, *current,
      *tuner, *layer, *best_config, *key, *key_values, *args, *positions, *heuristics, *launch, *number, *numbers,
      *option_plans, *m, *wait_for_feeder;
} g_names;

int launcher_traverse(PyObject* self, visitproc visit, void* arg) {
  Launcher* l = reinterpret_cast<Launcher*>(self);
  Py_VISIT(l->slow);
  Py_VISIT(l->config);
  if (int r = l->local_dict.traverse(visit, arg)) return r;
  if (int r = l->thread_dict.traverse(visit, arg)) return r;
  for (PyObject* k : l->seen) Py_VISIT(k);
  for (KernelKept& c : l->kept)
    if (int r = c.traverse(visit, arg)) return r;
  return 0;
}

int launcher_clear(PyObject* self) {
  Launcher* l = reinterpret_cast<Launcher*>(self);
  Py_CLEAR(l->slow);
  Py_CLEAR(l->config);
  l->local_dict.reset();
  l->thread_dict.reset();
  for (PyObject*& k : l->seen) Py_CLEAR(k);
  for (KernelKept& c : l->kept) c.clear();
  Py_CLEAR(l->spare_probe);
  return 0;
}

// `a == b` as Python finds it, for the values frames keys hold: two exact tuples item by item here (what
// tuple comparison does: equal sizes, each pair identical or `==`), without the generic comparison's dispatch
// and its result object at each level; anything else by `PyObject_RichCompareBool`. 1, 0, or -1 and an
// exception.
int equal_values(PyObject* a, PyObject* b, int depth = 0) {
  if (a == b) return 1;
  if (depth < 8 && PyTuple_CheckExact(a) && PyTuple_CheckExact(b)) {
    Py_ssize_t n = PyTuple_GET_SIZE(a);
    if (n != PyTuple_GET_SIZE(b)) return 0;
    for (Py_ssize_t i = 0; i < n; ++i) {
      int eq = equal_values(PyTuple_GET_ITEM(a, i), PyTuple_GET_ITEM(b, i), depth + 1);
      if (eq != 1) return eq;
    }
    return 1;
  }
  return PyObject_RichCompareBool(a, b, Py_EQ);
}

// The frames on a launch's stack: `compiled_frames.Frame` instances (the class `configure` was given), whose
// slots are read directly at the offsets read from its member descriptors; a frame of another class (none
// is made) is read by attribute.
struct Frames {
  PyTypeObject* type;
  Py_ssize_t offsets[tilelens_native::NFRAME];

  // A new reference to the frame's `field` (named `name`), or nullptr and an exception.
  PyObject* get(PyObject* frame, int field, PyObject* name) const {
    if (Py_TYPE(frame) == type) {
      PyObject* value = tilelens_native::frame_slot(frame, offsets, field);
      if (value != nullptr) return Py_NewRef(value);
    }
    return PyObject_GetAttr(frame, name);
  }
  // `compiled_frames.key_values(frame)`: the slot, or made from `args` and `positions` when the slot is None
  // and both are set (a new reference, or nullptr and an exception).
  PyObject* key_values(PyObject* frame) const {
    Ref values(get(frame, tilelens_native::FRAME_KEY_VALUES, g_names.key_values));
    if (!values || values.get() != Py_None) return values.release();
    Ref args(get(frame, tilelens_native::FRAME_ARGS, g_names.args));
    Ref positions(args ? get(frame, tilelens_native::FRAME_POSITIONS, g_names.positions) : nullptr);
    if (!positions) return nullptr;
    if (args.get() == Py_None || positions.get() == Py_None) return values.release();
    return tilelens_native::key_values_of(args.get(), positions.get());
  }
  // Whether `key_values(frame) == last` as Python finds it, without making the key values: `last` a 2-tuple
  // whose count is `==` the number of arguments and whose values are each `==` the argument at its position
  // (`equal_values`). 1, 0, or -1 and an exception.
  int key_values_equal(PyObject* frame, PyObject* last) const {
    Ref values(get(frame, tilelens_native::FRAME_KEY_VALUES, g_names.key_values));
    Ref args(values ? get(frame, tilelens_native::FRAME_ARGS, g_names.args) : nullptr);
    Ref positions(args ? get(frame, tilelens_native::FRAME_POSITIONS, g_names.positions) : nullptr);
    if (!positions) return -1;
    if (values.get() != Py_None || args.get() == Py_None || positions.get() == Py_None)
      return equal_values(last, values.get());
    PyObject* a = args.get();
    PyObject* p = positions.get();
    if (!PyTuple_CheckExact(a) || !PyTuple_CheckExact(p) || !PyTuple_CheckExact(last) || PyTuple_GET_SIZE(last) != 2)
      return 0;
    PyObject* kept = PyTuple_GET_ITEM(last, 1);
    Py_ssize_t m = PyTuple_GET_SIZE(p);
    if (!PyTuple_CheckExact(kept) || PyTuple_GET_SIZE(kept) != m) return 0;
    Ref count(PyLong_FromSsize_t(PyTuple_GET_SIZE(a)));
    int eq = count ? equal_values(PyTuple_GET_ITEM(last, 0), count.get()) : -1;
    for (Py_ssize_t j = 0; eq == 1 && j < m; ++j) {
      Py_ssize_t at = PyLong_AsSsize_t(PyTuple_GET_ITEM(p, j));
      if (at < 0 || at >= PyTuple_GET_SIZE(a)) {
        PyErr_Clear();
        return 0;  // what `key_values` makes of it fails: the caller's `frames_key` says so
      }
      eq = equal_values(PyTuple_GET_ITEM(kept, j), PyTuple_GET_ITEM(a, at));
    }
    return eq;
  }
  int set(PyObject* frame, int field, PyObject* name, PyObject* value) const {
    if (Py_TYPE(frame) != type) return PyObject_SetAttr(frame, name, value);
    Py_XSETREF(tilelens_native::frame_slot(frame, offsets, field), Py_NewRef(value));
    return 0;
  }
};

// The router's `_attach`: the innermost tuner frame on `stack` gets the launch's handle (`handle()` makes it),
// unless that frame's `launch` is False (a call that did not tune: no handle wanted, none made).
template <typename Handle>
int attach(const Frames& frames, PyObject* stack, Handle&& handle) {
  for (Py_ssize_t i = PyList_GET_SIZE(stack) - 1; i >= 0; --i) {
    PyObject* frame = PyList_GET_ITEM(stack, i);
    Ref tuner(frames.get(frame, tilelens_native::FRAME_TUNER, g_names.tuner));
    if (!tuner) return -1;
    int is = PyObject_IsTrue(tuner.get());
    if (is < 0) return -1;
    if (!is) continue;
    if (Py_TYPE(frame) == frames.type &&
        tilelens_native::frame_slot(frame, frames.offsets, tilelens_native::FRAME_LAUNCH) == Py_False)
      return 0;
    PyObject* made = handle();
    if (made == nullptr) return -1;
    return frames.set(frame, tilelens_native::FRAME_LAUNCH, g_names.launch, made);
  }
  return 0;
}

// `compiled_frames.frame_key` of every frame on `stack`, as a tuple (nullptr and an exception on failure).
PyObject* frames_key(const Frames& frames, PyObject* stack) {
  Py_ssize_t n = PyList_GET_SIZE(stack);
  Ref out(PyTuple_New(n));
  if (!out) return nullptr;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* frame = PyList_GET_ITEM(stack, i);
    Ref tuner(frames.get(frame, tilelens_native::FRAME_TUNER, g_names.tuner));
    Ref layer(frames.get(frame, tilelens_native::FRAME_LAYER, g_names.layer));
    if (!tuner || !layer) return nullptr;
    int is = PyObject_IsTrue(tuner.get());
    if (is < 0) return nullptr;
    Ref id(PyLong_FromVoidPtr(layer.get()));
    if (!id) return nullptr;
    PyObject* item;
    if (is) {  // not the autotuner's `best_config`, which another thread's call may have set (`frame_key`)
      Ref key(frames.get(frame, tilelens_native::FRAME_KEY, g_names.key));
      Ref values(frames.key_values(frame));
      if (!key || !values) return nullptr;
      item = PyTuple_Pack(3, id.get(), key.get(), values.get());
    } else {
      Ref heuristics(frames.get(frame, tilelens_native::FRAME_HEURISTICS, g_names.heuristics));
      if (!heuristics) return nullptr;
      item = PyTuple_Pack(2, id.get(), heuristics.get());
    }
    if (item == nullptr) return nullptr;
    PyTuple_SET_ITEM(out.get(), i, item);
  }
  return out.release();
}

// Whether `frames_key(frames, stack)` equals `key` (a kernel's last template's frames key), seen in place
// without making it: 1 when every part is equal as the tuples' comparison would find (ids by value, the
// tuning key and its values and the heuristics values by `==`, in that order); 0 when that is not certain
// (the caller makes the key and compares); -1 and an exception when reading a frame failed as
// `frames_key` would have.
int frames_match(const Frames& frames, PyObject* stack, PyObject* key) {
  Py_ssize_t n = PyList_GET_SIZE(stack);
  if (n == 0) return key == Py_None;
  if (!PyTuple_CheckExact(key) || PyTuple_GET_SIZE(key) != n) return 0;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* frame = PyList_GET_ITEM(stack, i);
    PyObject* item = PyTuple_GET_ITEM(key, i);
    Ref tuner(frames.get(frame, tilelens_native::FRAME_TUNER, g_names.tuner));
    Ref layer(frames.get(frame, tilelens_native::FRAME_LAYER, g_names.layer));
    if (!tuner || !layer) return -1;
    int is = PyObject_IsTrue(tuner.get());
    if (is < 0) return -1;
    if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != (is ? 3 : 2)) return 0;
    PyObject* id = PyTuple_GET_ITEM(item, 0);
    if (!PyLong_CheckExact(id) || PyLong_AsVoidPtr(id) != layer.get()) {
      PyErr_Clear();
      return 0;
    }
    if (is) {
      Ref tuning_key(frames.get(frame, tilelens_native::FRAME_KEY, g_names.key));
      if (!tuning_key) return -1;
      int eq = equal_values(PyTuple_GET_ITEM(item, 1), tuning_key.get());
      if (eq == 1) eq = frames.key_values_equal(frame, PyTuple_GET_ITEM(item, 2));
      if (eq != 1) {
        PyErr_Clear();
        return 0;
      }
    } else {
      Ref heuristics(frames.get(frame, tilelens_native::FRAME_HEURISTICS, g_names.heuristics));
      if (!heuristics) return -1;
      int eq = equal_values(PyTuple_GET_ITEM(item, 1), heuristics.get());
      if (eq != 1) {
        PyErr_Clear();
        return 0;
      }
    }
  }
  return 1;
}

// A launch's arguments as interception handed them over: either a tuple and a dict (`grid`/`warmup` taken out
// of it by `launch`), or the vectorcall arguments `obj.run(*args, **kwargs)` arrived with (`vec`: the positional
// arguments after the kernel, then the keyword values named by `kwnames`, among them `grid` and `warmup` at
// `grid_at`/`warmup_at`). In the second form the tuple and the dict (without `grid`/`warmup`) are made only
// when Python is called with them (`tuple()`, `dict()`): a steady launch makes neither.
struct LaunchArgs {
  PyObject* jit = nullptr;
  PyObject* const* vec = nullptr;
  Py_ssize_t nargs = 0;
  PyObject* kwnames = nullptr;
  Py_ssize_t grid_at = -1, warmup_at = -1;
  Ref args, kwargs;

  bool vector() const { return vec != nullptr; }
  Py_ssize_t nkw() const { return kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames); }
  // The number of keyword arguments besides `grid`/`warmup`.
  Py_ssize_t options() const {
    return vector() ? nkw() - (grid_at >= 0) - (warmup_at >= 0) : PyDict_GET_SIZE(kwargs.get());
  }
  PyObject* tuple() {
    if (!args) {
      args.reset(PyTuple_New(nargs));
      for (Py_ssize_t i = 0; args && i < nargs; ++i) PyTuple_SET_ITEM(args.get(), i, Py_NewRef(vec[i]));
    }
    return args.get();
  }
  PyObject* dict() {
    if (!kwargs) {
      kwargs.reset(PyDict_New());
      for (Py_ssize_t i = 0; kwargs && i < nkw(); ++i) {
        if (i != grid_at && i != warmup_at &&
            PyDict_SetItem(kwargs.get(), PyTuple_GET_ITEM(kwnames, i), vec[nargs + i]) < 0)
          kwargs.reset(nullptr);
      }
    }
    return kwargs.get();
  }
  // The names of the keyword arguments besides `grid`/`warmup`, in their order (a new tuple).
  PyObject* option_names() const {
    Ref names(PyTuple_New(options()));
    if (!names) return nullptr;
    Py_ssize_t j = 0;
    if (vector()) {
      for (Py_ssize_t i = 0; i < nkw(); ++i) {
        if (i != grid_at && i != warmup_at) PyTuple_SET_ITEM(names.get(), j++, Py_NewRef(PyTuple_GET_ITEM(kwnames, i)));
      }
    } else {
      Py_ssize_t pos = 0;
      PyObject *name, *value;
      while (PyDict_Next(kwargs.get(), &pos, &name, &value)) PyTuple_SET_ITEM(names.get(), j++, Py_NewRef(name));
    }
    return names.release();
  }
  // The value of keyword argument `name` (borrowed), or nullptr (an exception set only on an error).
  PyObject* option_value(PyObject* name) const {
    if (!vector()) return PyDict_GetItemWithError(kwargs.get(), name);
    for (Py_ssize_t i = 0; i < nkw(); ++i) {
      if (tilelens_native::is_name(PyTuple_GET_ITEM(kwnames, i), name)) return vec[nargs + i];
    }
    return nullptr;
  }
  // The keyword arguments as the interception's dict holds them before `launch` takes `grid`/`warmup` out
  // (the router's `launch` takes them out itself).
  PyObject* whole_dict() {
    if (!vector()) return Py_NewRef(kwargs.get());
    Ref whole(PyDict_New());
    for (Py_ssize_t i = 0; whole && i < nkw(); ++i) {
      if (PyDict_SetItem(whole.get(), PyTuple_GET_ITEM(kwnames, i), vec[nargs + i]) < 0) whole.reset(nullptr);
    }
    return whole.release();
  }
};

// `RoutedKernel.options_key(kwargs)`: from the plan the kernel made for these keyword names (`option_plans`:
// names -> (the names kept, their getter)), the same (kept names, `itemgetter(*kept)(kwargs)` or ()) without
// a Python call or, in vector form, the dict; the method itself when no plan is made yet.
PyObject* options_key(PyObject* k, LaunchArgs& a, const Slots& slots) {
  Ref names(a.option_names());
  Ref plans(slot_or_attr(k, slots.kernel, slots.kernel_at[K_OPTION_PLANS], g_names.option_plans));
  if (!names || !plans) return nullptr;
  PyObject* plan = PyDict_CheckExact(plans.get()) ? PyDict_GetItemWithError(plans.get(), names.get()) : nullptr;
  if (plan == nullptr && PyErr_Occurred()) return nullptr;
  PyObject* kept = plan != nullptr && PyTuple_CheckExact(plan) && PyTuple_GET_SIZE(plan) == 2
                       ? PyTuple_GET_ITEM(plan, 0) : nullptr;
  if (kept == nullptr || !PyTuple_CheckExact(kept)) {
    PyObject* kwargs = a.dict();
    return kwargs ? PyObject_CallMethodOneArg(k, g_names.options_key, kwargs) : nullptr;
  }
  // The same plan under the names as the call came (with `grid` and `warmup`, which a plan's own key never
  // holds), for `options_match`.
  if (a.vector() && PyDict_CheckExact(plans.get()) && PyDict_SetItem(plans.get(), a.kwnames, plan) < 0)
    return nullptr;
  Py_ssize_t m = PyTuple_GET_SIZE(kept);
  Ref got(m == 1 ? nullptr : PyTuple_New(m));
  for (Py_ssize_t j = 0; j < m; ++j) {  // each kept name is one of `names`
    PyObject* value = a.option_value(PyTuple_GET_ITEM(kept, j));
    if (value == nullptr) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_KeyError, "a kept launch option is missing");
      return nullptr;
    }
    if (m == 1) got.reset(Py_NewRef(value));
    else if (got) PyTuple_SET_ITEM(got.get(), j, Py_NewRef(value));
  }
  if (!got) return nullptr;
  return PyTuple_Pack(2, kept, got.get());
}

// A new reference to a module's global `name`, read from its dict (nullptr and an exception when missing).
PyObject* module_global(PyObject* module, PyObject* name) {
  if (PyModule_CheckExact(module)) {
    PyObject* value = PyDict_GetItemWithError(PyModule_GetDict(module), name);
    if (value != nullptr) return Py_NewRef(value);
    if (PyErr_Occurred()) return nullptr;
  }
  return PyObject_GetAttr(module, name);
}

// Whether `options_key(k, a)` equals `key` (the kernel's last template's options key), seen in place without
// making it: 1 when the plan of the call's names (as the call came, see `options_key`) keeps `key`'s names
// (the same tuple) and each kept value is `==` the last's; 0 when that is not certain (the caller makes the
// key and compares); -1 and an exception.
int options_match(PyObject* k, LaunchArgs& a, PyObject* key, const Slots& slots, PlanCache& cache) {
  if (!a.options()) return key == Py_None;  // the key is None: equal only to None (a tuple never is)
  if (!a.vector() || !PyTuple_CheckExact(key) || PyTuple_GET_SIZE(key) != 2) return 0;
  Ref plans(slot_or_attr(k, slots.kernel, slots.kernel_at[K_OPTION_PLANS], g_names.option_plans));
  if (!plans) return -1;
  if (!PyDict_CheckExact(plans.get())) return 0;
  bool was_kept = false;
  PyObject* plan = cache.plan_for(k, plans.get(), a.kwnames, was_kept);
  if (plan == nullptr) return PyErr_Occurred() ? -1 : 0;
  PyObject* kept = PyTuple_GET_ITEM(plan, 0);
  if (kept != PyTuple_GET_ITEM(key, 0) || !PyTuple_CheckExact(kept)) return 0;
  Py_ssize_t m = PyTuple_GET_SIZE(kept);
  PyObject* last = PyTuple_GET_ITEM(key, 1);
  if (m != 1 && (!PyTuple_CheckExact(last) || PyTuple_GET_SIZE(last) != m)) return 0;
  const bool located = cache.located;  // `plan` is the cache's (kept or found just now) and so are its names
  for (Py_ssize_t j = 0; j < m; ++j) {
    PyObject* value = located ? a.vec[a.nargs + cache.at[j]] : a.option_value(PyTuple_GET_ITEM(kept, j));
    int eq = value == nullptr ? 0 : PyObject_RichCompareBool(m == 1 ? last : PyTuple_GET_ITEM(last, j), value, Py_EQ);
    if (eq != 1) {
      PyErr_Clear();
      return 0;
    }
  }
  return 1;
}

// The launch options of `options_key(k, a)` as words: none, or the kept names' tuple (by identity) and each
// kept value, from the plan cache's plan for the call's names (`PlanCache::plan_for`; `kept_count` counts the
// launches that found it kept). Not `ok` when that plan is not there yet or its names are not all located, or the call came as a
// dict.
void options_words(PyObject* k, const LaunchArgs& a, const Slots& slots, PlanCache& cache, KeyWords& words,
                   Py_ssize_t& kept_count) {
  if (!a.options()) {
    words.put(KeyWords::W_NO_OPTIONS);
    return;
  }
  if (!a.vector() || slots.kernel == nullptr || Py_TYPE(k) != slots.kernel) {
    words.ok = false;
    return;
  }
  PyObject* plans = *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(k) + slots.kernel_at[K_OPTION_PLANS]);
  if (plans == nullptr || !PyDict_CheckExact(plans)) {
    words.ok = false;
    return;
  }
  bool was_kept = false;
  PyObject* plan = cache.plan_for(k, plans, a.kwnames, was_kept);
  if (plan == nullptr) {
    PyErr_Clear();
    words.ok = false;
    return;
  }
  if (was_kept) ++kept_count;
  PyObject* kept = PyTuple_GET_ITEM(plan, 0);
  if (!cache.located || !PyTuple_CheckExact(kept)) {
    words.ok = false;
    return;
  }
  words.put(KeyWords::W_OPTIONS);
  words.obj(kept);
  for (Py_ssize_t j = 0; words.ok && j < PyTuple_GET_SIZE(kept); ++j) words.value(a.vec[a.nargs + cache.at[j]]);
}

// The frames of `frames_key(frames, stack)` as words: per frame its layer (by identity) and, for an
// autotuner's, its tuning key and key values (made from `args` and `positions` as `key_values` makes them,
// without making them), for a heuristics layer's, its values. Not `ok` for a frame of another class or
// anything a frame's slots hold that `KeyWords` does not take. `caller`, when not yet pushed, is the innermost
// frame: its words are put as the `Frame` it would be made into (`CallerFrame`) puts them.
void frames_words(const Frames& frames, PyObject* stack, KeyWords& words, const CallerFrame* caller) {
  Py_ssize_t n = PyList_GET_SIZE(stack);
  bool pending = caller != nullptr && caller->frame == nullptr;
  words.put(KeyWords::W_FRAMES);
  words.put(static_cast<uint64_t>(n + pending));

  for (Py_ssize_t i = 0; words.ok && i < n; ++i) {
    PyObject* frame = PyList_GET_ITEM(stack, i);
    if (Py_TYPE(frame) != frames.type) {
      words.ok = false;
      return;
    }
    using namespace tilelens_native;
    PyObject* tuner = frame_slot(frame, frames.offsets, FRAME_TUNER);
    PyObject* layer = frame_slot(frame, frames.offsets, FRAME_LAYER);
    if (layer == nullptr || (tuner != Py_True && tuner != Py_False)) {
      words.ok = false;
      return;
    }
    if (tuner == Py_False) {
      PyObject* heuristics = frame_slot(frame, frames.offsets, FRAME_HEURISTICS);
      words.put(KeyWords::W_HEURISTICS);
      words.obj(layer);
      if (heuristics == nullptr) words.ok = false;
      else words.value(heuristics);
      continue;
    }
    PyObject* key = frame_slot(frame, frames.offsets, FRAME_KEY);
    PyObject* values = frame_slot(frame, frames.offsets, FRAME_KEY_VALUES);
    PyObject* args = frame_slot(frame, frames.offsets, FRAME_ARGS);
    PyObject* positions = frame_slot(frame, frames.offsets, FRAME_POSITIONS);
    if (key == nullptr || values == nullptr || args == nullptr || positions == nullptr) {
      words.ok = false;
      return;
    }
    words.put(KeyWords::W_TUNER);
    words.obj(layer);
    words.value(key);
    if (values != Py_None || args == Py_None || positions == Py_None) {
      words.value(values);
      continue;
    }
    if (!PyTuple_CheckExact(args) || !PyTuple_CheckExact(positions)) {
      words.ok = false;
      return;
    }
    // (len(args), tuple(args[i] for i in positions)), as `value` puts that tuple
    Py_ssize_t m = PyTuple_GET_SIZE(positions);
    words.put(KeyWords::W_TUPLE);
    words.put(2);
    words.put(KeyWords::W_INT);
    words.put(static_cast<uint64_t>(PyTuple_GET_SIZE(args)));
    words.put(KeyWords::W_TUPLE);
    words.put(static_cast<uint64_t>(m));
    for (Py_ssize_t j = 0; words.ok && j < m; ++j) {
      PyObject* p = PyTuple_GET_ITEM(positions, j);
      int64_t at = -1;
      if (!int64_of(p, at) || at < 0 || at >= PyTuple_GET_SIZE(args)) {
        words.ok = false;
        return;
      }
      words.value(PyTuple_GET_ITEM(args, at));
    }
  }
  if (pending && words.ok) {
    words.put(KeyWords::W_TUNER);
    words.obj(caller->tuner);
    words.value(caller->key != nullptr ? caller->key : Py_None);
    words.value(Py_None);  // its key values: None, with its args and positions
  }
}

// The tests a launch takes when none of its kernel's kept templates is its own: `_templated`'s test of the
// kernel's last template, seen in place, else the key made and compared with the last's or looked up in the
// templates table (the one found then becomes the kernel's last, as `_templated` makes it). A template found
// is kept (`KeptTemplates`) for the next launches like this one. 1 with `number` set; 0 a new template or
// anything unusual (Python decides); -1 and an exception. Out of line and cold: once a kernel's templates are
// kept, a steady launch never runs it, and its code stays out of the steady path's cache lines.
TL_COLD int slower_tests(const Config& f, const Frames& frame_slots, const Slots& slots, PyObject* k, PyObject* last,
                         LaunchArgs& a, PyObject* stack, PyObject* sig, uint64_t hash, PyObject* metadata,
                         PyObject* node, PyObject* result, const KeyWords& key_words, KernelKept& kept, Ref& number) {
  TL_STAMP(testing_last);
  // `_templated`'s test of the kernel's last template, its parts seen in place: 1 equal, 2 equal but for the
  // launch options or frames, which could not be seen equal in place (their keys are compared below), 0 not.
  int options_same = 0, frames_same = 0;
  int same = PyTuple_GET_ITEM(last, 0) == f[TEMPLATES] && PyTuple_GET_ITEM(last, 1) == sig;
  if (same) {
    void* mid = PyLong_AsVoidPtr(PyTuple_GET_ITEM(last, 4));
    if (mid == nullptr && PyErr_Occurred()) return -1;
    same = mid == metadata;
  }
  if (same) same = PyObject_RichCompareBool(PyTuple_GET_ITEM(last, 5), node, Py_EQ);
  if (same < 0) return -1;
  if (same) {
    options_same = options_match(k, a, PyTuple_GET_ITEM(last, 2), slots, kept.plan);
    if (options_same < 0) return -1;
    frames_same = frames_match(frame_slots, stack, PyTuple_GET_ITEM(last, 3));
    if (frames_same < 0) return -1;
    same = options_same && frames_same ? 1 : 2;
  }
  TL_PART(PART_LAST, testing_last);
  TL_STAMP(looking_up);
  if (same == 1) {
    number.reset(Py_NewRef(PyTuple_GET_ITEM(last, 6)));
  } else {
    // The keys: compared with the last template's when only they were uncertain, else looked up whole (key:
    // kernel number, sig, options, frames, metadata id, node id).
    Ref options(options_same ? nullptr : a.options() ? options_key(k, a, slots) : Py_NewRef(Py_None));
    Ref frames(frames_same ? nullptr
                           : PyList_GET_SIZE(stack) ? frames_key(frame_slots, stack)
                                                    : Py_NewRef(Py_None));
    if ((!options_same && !options) || (!frames_same && !frames)) return -1;
    if (same == 2) {
      same = 1;
      if (!options_same) same = PyObject_RichCompareBool(PyTuple_GET_ITEM(last, 2), options.get(), Py_EQ);
      if (same == 1 && !frames_same)
        same = PyObject_RichCompareBool(PyTuple_GET_ITEM(last, 3), frames.get(), Py_EQ);
      if (same < 0) return -1;
    }
    if (same == 1) {
      number.reset(Py_NewRef(PyTuple_GET_ITEM(last, 6)));
    } else {
      if (!frames) frames.reset(PyList_GET_SIZE(stack) ? frames_key(frame_slots, stack) : Py_NewRef(Py_None));
      if (!options) options.reset(a.options() ? options_key(k, a, slots) : Py_NewRef(Py_None));
      if (!frames || !options) return -1;
      Ref kernel_number(PyObject_GetAttr(k, g_names.number));
      Ref mid(PyLong_FromVoidPtr(metadata));
      Ref table(PyObject_GetAttr(f[TEMPLATES], g_names.numbers));
      if (!kernel_number || !mid || !table || !PyDict_CheckExact(table.get())) return -1;
      Ref key(PyTuple_Pack(6, kernel_number.get(), sig, options.get(), frames.get(), mid.get(), node));
      if (!key) return -1;
      PyObject* in_table = PyDict_GetItemWithError(table.get(), key.get());
      if (in_table == nullptr) return PyErr_Occurred() ? -1 : 0;
      number.reset(Py_NewRef(in_table));
      Ref now(PyTuple_Pack(7, f[TEMPLATES], sig, options.get(), frames.get(), mid.get(), node, in_table));
      if (!now || PyObject_SetAttr(k, g_names.last_template, now.get()) < 0) return -1;
    }
  }
  // Kept for the next launches like this one. The words were made before the tests above, which may have
  // run Python code: a frame's slots or the plan may have changed since, so they are made again.
  KeyWords now_words;
  Py_ssize_t again = 0;  // counted once a launch, above
  options_words(k, a, slots, kept.plan, now_words, again);
  if (now_words.ok) frames_words(frame_slots, stack, now_words, nullptr);
  if (now_words.ok && key_words.ok && now_words.n == key_words.n &&
      std::memcmp(now_words.w, key_words.w, sizeof(uint64_t) * key_words.n) == 0) {
    std::vector<PyObject*> dropped;
    kept.templates.keep(k, f[TEMPLATES], sig, hash, metadata, result, node, number.get(), now_words,
                        dropped);
    for (PyObject* o : dropped) Py_DECREF(o);
  }
  TL_PART(PART_LOOKUP, looking_up);
  return 1;
}

// The metadata (borrowed) the router's METADATA holds for the compiled kernel `result`, or nullptr (an
// exception set only on an error). Cold: the launcher keeps what it found here.
TL_COLD PyObject* table_metadata(PyObject* table, PyObject* result) {
  Ref id(PyLong_FromVoidPtr(result));
  if (!id) return nullptr;
  PyObject* entry = PyDict_GetItemWithError(table, id.get());
  if (entry == nullptr || !PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2 ||
      PyTuple_GET_ITEM(entry, 0) != result)
    return nullptr;
  return PyTuple_GET_ITEM(entry, 1);
}

// 1: the launch is of a template already made: one of its kernel's kept templates (`KeptTemplates`), seen by
// its words, else its last one (`last`) seen equal in place, else one found in the templates table by its key
// (which then becomes the kernel's last, as `_templated` makes the one it finds); a template found by either
// of the last two is kept for the next launches like it. `number`, `resolved` and the values are set: as
// `words` when they fit it and the launcher queues (`QUEUE`), else as the list `values`. 0: a new template, or
// anything unusual, or a failure (any exception is cleared by the caller): Python decides, from the same facts.
int steady(const Config& f, const Frames& frame_slots, const Slots& slots, PyObject* k, PyObject* last, PyObject* bound,
           PyObject* result, LaunchArgs& a, PyObject* stack, CallerFrame* caller, Probe* probe, Ref& number, Words& words,
           Ref& values, Grid& resolved, KernelKept& kept, Py_ssize_t& plans_kept, Py_ssize_t& kept_hits) {
  TL_STAMP(capturing);
  Ref plan(slot_or_attr(k, slots.kernel, slots.kernel_at[K_FLAT_PLAN], g_names.flat_plan));
  if (!plan) return -1;
  Values sink{nullptr, &words};
  if (f[QUEUE] == Py_None) {  // `flat` takes the list
    values.reset(PyList_New(0));
    if (!values) return -1;
    sink = Values{values.get(), nullptr};
  }
  Candidates candidates;  // the signatures a capture is compared with before it makes one
  kept.templates.candidates(k, candidates);
  candidates.last = PyTuple_GET_ITEM(last, 1);
  uint64_t hash = 0;  // of the Sig's codes
  Ref sig_ref(capture_sig(plan.get(), bound, candidates, sink, slots, hash));
  if (!sig_ref) return PyErr_Occurred() ? -1 : 0;
  if (sink.words != nullptr && !words.fits) {  // a value needs marshal: the list after all
    values.reset(PyList_New(0));
    Values list{values.get(), nullptr};
    Candidates same;
    same.last = sig_ref.get();
    uint64_t again_hash = 0;
    Ref again(values ? capture_sig(plan.get(), bound, same, list, slots, again_hash) : nullptr);
    if (!again) return PyErr_Occurred() ? -1 : 0;
  }
  PyObject* sig = sig_ref.get();
  TL_PART(PART_CAPTURE, capturing);
  TL_STAMP(finding);
  // The compiled kernel's metadata, as the router cached it at this kernel object's first launch (held: a
  // Python call below may let another thread replace what kept it).
  Ref metadata(Py_NewRef(Py_None));
  if (result != Py_None) {
    PyObject* known = kept.metadata.find(result);
    if (known == nullptr) {
      known = kept.templates.metadata_of(k, result, hash);
      if (known == nullptr && (known = table_metadata(f[METADATA], result)) == nullptr)
        return PyErr_Occurred() ? -1 : 0;
      metadata.reset(Py_NewRef(known));  // before `keep`, whose decrements may run Python code
      kept.metadata.keep(result, known);
    } else {
      metadata.reset(Py_NewRef(known));
    }
  }
  TL_PART(PART_METADATA, finding);
  TL_STAMP(reading_node);
  Ref node(module_global(f[TESTID], g_names.current));
  TL_PART(PART_NODE, reading_node);
  if (!node) return -1;
  TL_STAMP(testing_kept);
  KeyWords key_words;  // the launch's options and frames
  options_words(k, a, slots, kept.plan, key_words, plans_kept);
  if (key_words.ok) frames_words(frame_slots, stack, key_words, caller);
  PyObject* found = kept.templates.find(k, f[TEMPLATES], sig, hash, metadata.get(), node.get(), key_words);
  if (found != nullptr) {
    number.reset(Py_NewRef(found));
    ++kept_hits;
  }
  TL_PART(PART_KEPT, testing_kept);
  if (!number) {
    if (!caller_pushed(caller)) return -1;  // the slower tests read the stack
    int found_slower = slower_tests(f, frame_slots, slots, k, last, a, stack, sig, hash, metadata.get(), node.get(),
                                    result, key_words, kept, number);
    if (found_slower <= 0) return found_slower;
  }
  TL_STAMP(resolving);
  PyObject* value = probe->value != nullptr ? probe->value : Py_None;
  if (!resolved.read(value)) {  // not a tuple of ints (which `_grid_of` would resolve to itself, padded)
    PyObject* known = PyTuple_CheckExact(value) ? PyDict_GetItemWithError(f[GRIDS], value) : nullptr;
    if (known != nullptr) {
      resolved.tuple.reset(Py_NewRef(known));
    } else {
      if (PyErr_Occurred()) return -1;
      resolved.tuple.reset(call_n(f[GRID_OF], {value, bound}));
      if (!resolved.tuple) return -1;
    }
  }
  TL_PART(PART_GRID, resolving);
  return 1;
}

// `compat.run_compiled(jit, args, grid, kwargs)` without its frame: Triton's own `JITFunction.run(jit, *args,
// grid=grid, warmup=False, **kwargs)` (`kwargs` holds neither name: `launch` took them out).
PyObject* run_triton(PyObject* run, PyObject* jit, PyObject* args, PyObject* grid, PyObject* kwargs) {
  Py_ssize_t n = PyTuple_GET_SIZE(args), nk = PyDict_GET_SIZE(kwargs);
  std::vector<PyObject*> stack;
  stack.reserve(static_cast<size_t>(n + nk + 3));
  stack.push_back(jit);
  for (Py_ssize_t i = 0; i < n; ++i) stack.push_back(PyTuple_GET_ITEM(args, i));
  stack.push_back(grid);
  stack.push_back(Py_False);
  Ref names(PyTuple_New(nk + 2));
  if (!names) return nullptr;
  PyTuple_SET_ITEM(names.get(), 0, Py_NewRef(g_names.grid));
  PyTuple_SET_ITEM(names.get(), 1, Py_NewRef(g_names.warmup));
  Py_ssize_t pos = 0, i = 2;
  PyObject *name, *value;
  while (PyDict_Next(kwargs, &pos, &name, &value)) {
    PyTuple_SET_ITEM(names.get(), i++, Py_NewRef(name));
    stack.push_back(value);
  }
  return PyObject_Vectorcall(run, stack.data(), static_cast<size_t>(n + 1), names.get());
}

// Writes the low `Bytes` bytes of `x`, least significant first.
template <int Bytes>
void put_le(char*& p, uint64_t x) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  std::memcpy(p, &x, Bytes);
  p += Bytes;
#else
  for (int i = 0; i < Bytes; ++i) *p++ = static_cast<char>((x >> (8 * i)) & 0xff);
#endif
}

// A launch's clock reading: seconds read here, the float object made only when Python is handed it (`get`),
// or what the program's clock returned (`obj`, any object: packed only when an exact float).
struct Stamp {
  double seconds = 0.0;
  bool here = false;  // `seconds` is the reading; `obj`, when made, is its float
  Ref obj;

  void read(double value) {
    seconds = value;
    here = true;
  }
  // A new or kept reference (nullptr and an exception on failure).
  PyObject* get() {
    if (!obj && here) obj.reset(PyFloat_FromDouble(seconds));
    return obj.get();
  }
  // Whether it packs as a float, and its bits then.
  bool packs() const { return here || (obj && PyFloat_CheckExact(obj.get())); }
  uint64_t bits() const {
    double d = here ? seconds : PyFloat_AS_DOUBLE(obj.get());
    uint64_t out;
    std::memcpy(&out, &d, sizeof(out));
    return out;
  }
};

// A packed item's head (`launch_pack.HEAD`: n, template, the grid) as words, when every part fits the packed
// form (the values too: `launch_pack.pack`'s conditions); false otherwise: the caller marshals (or fails, when
// making the grid's tuple raised: then with that exception set).
bool packed_head(int64_t n, PyObject* number, const Stamp& started, const Stamp& duration, Grid& grid,
                 const Words& values, int64_t head[5]) {
  if (!values.fits || !started.packs() || !duration.packs()) return false;
  head[0] = n;
  if (!int64_of(number, head[1])) return false;
  if (grid.words) {
    for (int i = 0; i < 3; ++i) head[2 + i] = grid.dims[i];
    return true;
  }
  PyObject* resolved = grid.get();
  if (resolved == nullptr || !PyTuple_CheckExact(resolved) || PyTuple_GET_SIZE(resolved) != 3) return false;
  for (int i = 0; i < 3; ++i)
    if (!int64_of(PyTuple_GET_ITEM(resolved, i), head[2 + i])) return false;
  return true;
}

// The size of the packed item of `values`.
Py_ssize_t packed_size(const Words& values) { return 1 + kPackHead + values.n + values.bytes; }

// `launch_pack.pack`'s bytes for the item ("m", n, number, started, duration, grid, values), its head read by
// `packed_head`, written at `p` (`packed_size(values)` bytes).
void write_packed(char* p, const int64_t head[5], const Stamp& started, const Stamp& duration, const Words& values) {
  Py_ssize_t count = values.n;
  *p++ = static_cast<char>(kPackMark);
  put_le<8>(p, static_cast<uint64_t>(head[0]));
  put_le<8>(p, static_cast<uint64_t>(head[1]));
  put_le<8>(p, started.bits());
  put_le<8>(p, duration.bits());
  for (int i = 2; i < 5; ++i) put_le<8>(p, static_cast<uint64_t>(head[i]));
  put_le<4>(p, static_cast<uint64_t>(count));
  if (count) std::memcpy(p, values.codes, static_cast<size_t>(count));
  p += count;
  for (Py_ssize_t i = 0; i < count; ++i) {
    if (values.codes[i] == '?') *p++ = static_cast<char>(values.words[i] != 0);
    else put_le<8>(p, values.words[i]);
  }
}

// The values of `words` as the list a capture into a list makes (nullptr and an exception on failure).
PyObject* list_of(const Words& words) {
  Ref list(PyList_New(words.n));
  if (!list) return nullptr;
  for (Py_ssize_t i = 0; i < words.n; ++i) {
    PyObject* v;
    if (words.codes[i] == '?') {
      v = PyBool_FromLong(words.words[i] != 0);
    } else if (words.codes[i] == 'd') {
      double d;
      std::memcpy(&d, &words.words[i], sizeof(d));
      v = PyFloat_FromDouble(d);
    } else {
      v = PyLong_FromLongLong(static_cast<long long>(words.words[i]));
    }
    if (v == nullptr) return nullptr;
    PyList_SET_ITEM(list.get(), i, v);
  }
  return list.release();
}

// An item given as Python objects (`launch_pack.pack`'s arguments), read for packing: its head (`packed_head`),
// stamps and values. False (no exception) when it does not pack: a value not an exact int, float or bool, or
// a part past what the packed form holds.
struct FlatItem {
  Words words;
  Grid grid;
  Stamp at, took;
  int64_t head[5];

  bool read(PyObject* n, PyObject* number, PyObject* started, PyObject* duration, PyObject* resolved,
            PyObject* values) {
    if (!PyList_CheckExact(values)) return false;
    Values sink{nullptr, &words};
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(values); ++i) {
      PyObject* v = PyList_GET_ITEM(values, i);
      if (!PyBool_Check(v) && !PyLong_CheckExact(v) && !PyFloat_CheckExact(v)) return false;
      sink.scalar(v);
    }
    grid.tuple.reset(Py_NewRef(resolved));
    at.obj.reset(Py_NewRef(started));
    took.obj.reset(Py_NewRef(duration));
    int64_t index;
    return int64_of(n, index) && packed_head(index, number, at, took, grid, words, head);
  }
};

// The same from a list of values (what `capture` returns): nullptr without an exception when it does not pack.
PyObject* pack_flat(PyObject* n, PyObject* number, PyObject* started, PyObject* duration, PyObject* grid,
                    PyObject* values) {
  FlatItem item;
  if (!item.read(n, number, started, duration, grid, values)) return nullptr;
  PyObject* out = PyBytes_FromStringAndSize(nullptr, packed_size(item.words));
  if (out != nullptr) write_packed(PyBytes_AS_STRING(out), item.head, item.at, item.took, item.words);
  return out;
}

PyObject* pack_flat_py(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 6) {
    PyErr_SetString(PyExc_TypeError, "pack_flat(n, template, started, duration, grid, values)");
    return nullptr;
  }
  PyObject* out = pack_flat(args[0], args[1], args[2], args[3], args[4], args[5]);
  if (out == nullptr && !PyErr_Occurred()) Py_RETURN_NONE;
  return out;
}

// `itertools.count(start)` as the writer counts launches and queued items with (`native.counter`): `next()`
// gives the next int; `queue_flat` takes the next value without a call and without making an int object.
// Its repr is `count(N)`, N the next value, as `itertools.count`'s.
struct Counter {
  PyObject_HEAD
  long long next;
};

PyTypeObject CounterType = {PyVarObject_HEAD_INIT(nullptr, 0)};

void counter_dealloc(PyObject* self) { Py_TYPE(self)->tp_free(self); }

PyObject* counter_next(PyObject* self) {
  return PyLong_FromLongLong(reinterpret_cast<Counter*>(self)->next++);
}

PyObject* counter_repr(PyObject* self) {
  return PyUnicode_FromFormat("count(%lld)", reinterpret_cast<Counter*>(self)->next);
}

PyObject* counter_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  long long start = 0;
  static const char* keywords[] = {"start", nullptr};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|L:Counter", const_cast<char**>(keywords), &start))
    return nullptr;
  Counter* c = PyObject_New(Counter, type);
  if (c == nullptr) return nullptr;
  c->next = start;
  return reinterpret_cast<PyObject*>(c);
}

// A value taken from a counter (`take`): a `Counter`'s as a machine word, made an int object only when asked
// (`get`); any other iterator's (`itertools.count`) as the object `next()` gave.
struct Launched {
  int64_t index = 0;
  bool fits = false;  // `index` holds the value
  Ref obj;

  // 0, or -1 and an exception (StopIteration when the iterator ended).
  int take(PyObject* it) {
    if (Py_IS_TYPE(it, &CounterType)) {
      index = reinterpret_cast<Counter*>(it)->next++;
      fits = true;
      return 0;
    }
    obj.reset(PyIter_Next(it));
    if (!obj) {
      if (!PyErr_Occurred()) PyErr_SetNone(PyExc_StopIteration);
      return -1;
    }
    fits = int64_of(obj.get(), index);
    return 0;
  }
  // A new or kept reference to the value (nullptr and an exception on failure).
  PyObject* get() {
    if (!obj) obj.reset(PyLong_FromLongLong(index));
    return obj.get();
  }
};

// Steady launches' packed items (`launch_pack`), written one after another into this buffer without an object
// a launch: launch_pack's batch, BATCH_MARK | count: uint32 | the count items, after `kFrameRoom` bytes kept
// free for the headers of a parts frame (`writer_child.frame_parts`) of that one batch. When the batch holds
// `batch_bytes` or more the launcher sends it (`batch_send`): written into the writer process's pipe as that
// frame, by the launching thread itself, when the pipe has room for all of it, the writer's queue is empty and
// its feeder is not sending; otherwise, and before the launcher queues an item it could not pack, it is sealed
// (`seal`) into the queue as one bytes item. A batch not yet full is sent the same way, directly only, once its
// oldest launch has waited `send_age` (half the feeder's period), so that a launching program's batches go
// into the pipe from its own thread even when it launches too slowly to fill one within the feeder's period.
// The writer (Python) seals it before anything else it queues and whenever its feeder wakes. So the pipe
// receives every item in the order the program made them, and a launch waits in the buffer no longer than it
// would have in the queue.
//
// Why the launching thread writes (measured on the H200, issue 15): a feeder thread that takes the program's
// GIL every few milliseconds to send what accumulated makes the launching thread block one to three times
// more a ~10 ms sample, and it resumes cold; written here, a steady program hands nothing over. The feeder
// waits in `idle` with the GIL released, and takes it only when something was queued (`flag`), when it is
// woken (`wake`), or when a launch has waited in the buffer long enough that sending it now keeps the
// feeder's period (`idle`'s argument) as the longest a launch waits.
//
// Read and written only with the GIL held, by code that runs no Python code between its reads and its writes,
// except `shared`, which `idle` reads without it; a seal detaches the buffer before it makes the bytes object
// (an allocation may run a finalizer that launches: that launch goes into the next batch). Direct sends happen
// only in the process that attached the pipe (a forked child's launches never write into its parent's pipe).
struct BatchShared {
  std::mutex lock;
  std::condition_variable woke;
  bool woken = false;  // `wake` was called since the feeder's `idle` last returned; guarded by `lock`
  std::atomic<bool> flagged{false};  // an item was queued since `idle` last returned
  std::atomic<int64_t> first_ns{0};  // the steady clock when the buffer's oldest launch was packed; 0: none
  // Why `idle` returned, counted (the feeder's own thread writes them; `stats` reads them with the GIL).
  std::atomic<long long> woken_returns{0}, flagged_returns{0}, aged_returns{0};
};

struct Batch {
  PyObject_HEAD
  char* data;
  Py_ssize_t size;
  Py_ssize_t capacity;
  uint32_t launches;
  int fd;  // the writer process's pipe for direct sends; -1: none (the batch is always sealed into the queue)
  long attached_pid;  // the process that attached `fd`
  bool busy;  // the writer's feeder took the queue and is sending it: no direct send until it is done
  Py_ssize_t pipe_capacity;
  long long sent_launches, sent_batches;  // sent directly so far
  // Batches `batch_send` did not send, by why (`stats`): the feeder was sending, an item was queued ahead, the
  // pipe had no room for the frame, no pipe attached in this process (a full batch is then queued).
  long long held_busy, held_queued, held_full_pipe, held_unattached;
  // The launch clock (`time.time()`) of the buffer's oldest launch, when the launcher read it itself (NaN
  // otherwise), and the age in seconds past which the launcher sends a batch that is not full yet (0: never).
  double first_started, send_age;
  BatchShared* shared;
};

PyTypeObject BatchType = {PyVarObject_HEAD_INIT(nullptr, 0)};

constexpr Py_ssize_t kFrameRoom = 16;  // writer_child's HEADER and PART (8 bytes each)
constexpr Py_ssize_t kBatchHead = 5;  // BATCH_MARK and the count
constexpr uint64_t kPartsFrame = uint64_t{1} << 63;  // writer_child.PARTS

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void batch_dealloc(PyObject* self) {
  Batch* b = reinterpret_cast<Batch*>(self);
  std::free(b->data);
  delete b->shared;
  Py_TYPE(self)->tp_free(self);
}

PyObject* batch_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {nullptr};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, ":LaunchBatch", const_cast<char**>(keywords))) return nullptr;
  BatchShared* shared = new (std::nothrow) BatchShared();
  if (shared == nullptr) return PyErr_NoMemory();
  Batch* b = PyObject_New(Batch, type);
  if (b == nullptr) {
    delete shared;
    return nullptr;
  }
  b->data = nullptr;
  b->size = b->capacity = 0;
  b->launches = 0;
  b->fd = -1;
  b->attached_pid = 0;
  b->busy = false;
  b->pipe_capacity = 0;
  b->sent_launches = b->sent_batches = 0;
  b->held_busy = b->held_queued = b->held_full_pipe = b->held_unattached = 0;
  b->first_started = std::nan("");
  b->send_age = 0.0;
  b->shared = shared;
  return reinterpret_cast<PyObject*>(b);
}

// Room for `more` bytes at the end (the frame's and the batch's heads reserved at its start); -1 and
// MemoryError on failure.
int batch_reserve(Batch* b, Py_ssize_t more) {
  Py_ssize_t start = b->size ? b->size : kFrameRoom + kBatchHead;
  if (start + more > b->capacity) {
    Py_ssize_t grown = b->capacity ? b->capacity : 4096;
    while (grown < start + more) grown *= 2;
    char* data = static_cast<char*>(std::realloc(b->data, static_cast<size_t>(grown)));
    if (data == nullptr) {
      PyErr_NoMemory();
      return -1;
    }
    b->data = data;
    b->capacity = grown;
  }
  b->size = start;
  return 0;
}

// Appends the packed item of `head` (`packed_head`'s), the stamps and `values`; -1 and MemoryError on failure.
int batch_add(Batch* b, const int64_t head[5], const Stamp& started, const Stamp& duration, const Words& values) {
  Py_ssize_t size = packed_size(values);
  if (batch_reserve(b, size) < 0) return -1;
  write_packed(b->data + b->size, head, started, duration, values);
  b->size += size;
  if (b->launches++ == 0) {
    b->shared->first_ns.store(steady_ns(), std::memory_order_relaxed);
    b->first_started = started.here ? started.seconds : std::nan("");
  }
  return 0;
}

// The batch's bytes (from BATCH_MARK on) once its head is written.
char* batch_body(Batch* b) {
  char* body = b->data + kFrameRoom;
  body[0] = static_cast<char>(kBatchMark);
  char* p = body + 1;
  put_le<4>(p, b->launches);
  return body;
}

void batch_empty(Batch* b) {
  b->size = 0;
  b->launches = 0;
  b->shared->first_ns.store(0, std::memory_order_relaxed);
}

// The sealed batch as one bytes item, the batch emptied (nullptr: it held no launch, or an exception).
PyObject* batch_take(Batch* b) {
  if (b->launches == 0) return nullptr;
  char* body = batch_body(b);  // detached first: see `Batch`
  char* data = b->data;
  Py_ssize_t size = b->size - kFrameRoom;
  b->data = nullptr;
  b->capacity = 0;
  batch_empty(b);
  PyObject* out = PyBytes_FromStringAndSize(body, size);
  std::free(data);
  return out;
}

// Queues `data` as the writer's `_put` does: appended by `append`, counted by `queued` (`Launched::take`; only a
// flush or close reads a count). 0, or -1 and an exception.
int queue_item(PyObject* append, PyObject* queued, PyObject* data) {
  Ref appended(call_n(append, {data}));
  if (!appended) return -1;
  Launched counted;
  return counted.take(queued);
}

// Seals `b` into the queue (`queue_item`). 1 sealed, 0 nothing to seal, -1 and an exception. `flag`: tell the
// feeder's `idle` (the launcher's seals; the writer's own are followed by its flag, or made by the feeder).
int batch_seal(Batch* b, PyObject* append, PyObject* queued, bool flag) {
  Ref data(batch_take(b));
  if (!data) return PyErr_Occurred() ? -1 : 0;
  if (queue_item(append, queued, data.get()) < 0) return -1;
  if (flag) b->shared->flagged.store(true, std::memory_order_release);
  return 1;
}

// `seal(append, queued)`: the writer's seal (Python), the same steps; True when it queued a batch.
PyObject* batch_seal_py(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "seal(append, queued)");
    return nullptr;
  }
  int sealed = batch_seal(reinterpret_cast<Batch*>(self), args[0], args[1], false);
  if (sealed < 0) return nullptr;
  return PyBool_FromLong(sealed);
}

// Sends the batch's launches into the attached pipe as one parts frame, the batch emptied: 1 sent; 0 not now
// (no pipe, another process, the feeder sending, `items` (the writer's queue) not empty, no room in the pipe
// for the whole frame, or a write that failed: the pipe is then detached and the feeder finds the child gone);
// -1 and an exception. Never blocks: with room for the whole frame a pipe write completes at once.
int batch_send(Batch* b, PyObject* items) {
#if defined(__linux__) && defined(F_GETPIPE_SZ)
  if (b->launches == 0) return 0;
  if (b->fd < 0 || b->attached_pid != static_cast<long>(getpid())) {
    ++b->held_unattached;
    return 0;
  }
  if (b->busy) {
    ++b->held_busy;
    return 0;
  }
  Py_ssize_t waiting = PyObject_Size(items);
  if (waiting != 0) {
    if (waiting < 0) return -1;
    ++b->held_queued;
    return 0;
  }
  int unread = 0;
  if (ioctl(b->fd, FIONREAD, &unread) < 0 || b->pipe_capacity - unread < b->size) {
    ++b->held_full_pipe;
    return 0;
  }
  batch_body(b);
  char* p = b->data;
  uint64_t body = static_cast<uint64_t>(b->size - kFrameRoom);
  put_le<8>(p, (body + 8) | kPartsFrame);
  put_le<8>(p, body);  // a bytes part: MARSHALLED clear
  Py_ssize_t done = 0;
  while (done < b->size) {
    ssize_t wrote = write(b->fd, b->data + done, static_cast<size_t>(b->size - done));
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) break;
    done += wrote;
  }
  if (done < b->size) {  // the child is gone (EPIPE): the queue and the feeder take it from here
    b->fd = -1;
    return 0;
  }
  b->sent_launches += b->launches;
  ++b->sent_batches;
  batch_empty(b);  // the buffer is kept for the next batch
  return 1;
#else
  (void)b;
  (void)items;
  return 0;
#endif
}

// `send(items)`: `batch_send` (the launcher's step when the batch is full), for tests; True when it sent.
PyObject* batch_send_py(PyObject* self, PyObject* items) {
  int sent = batch_send(reinterpret_cast<Batch*>(self), items);
  if (sent < 0) return nullptr;
  return PyBool_FromLong(sent);
}

// `attach(fd)`: full batches go into pipe `fd` directly from now on (-1: never); True when they will (Linux:
// the pipe's size read, and raised to 1 MiB where the system allows, so that a writer a little behind does not
// turn the launcher back to the queue). Called by the writer with the child's stdin.
PyObject* batch_attach(PyObject* self, PyObject* arg) {
  Batch* b = reinterpret_cast<Batch*>(self);
  long fd = PyLong_AsLong(arg);
  if (fd == -1 && PyErr_Occurred()) return nullptr;
  b->fd = -1;
#if defined(__linux__) && defined(F_GETPIPE_SZ)
  if (fd >= 0) {
    int size = fcntl(static_cast<int>(fd), F_GETPIPE_SZ);
    if (size > 0 && size < (1 << 20)) {
      int grown = fcntl(static_cast<int>(fd), F_SETPIPE_SZ, 1 << 20);
      if (grown > size) size = grown;
    }
    if (size > 0) {
      b->fd = static_cast<int>(fd);
      b->pipe_capacity = size;
      b->attached_pid = static_cast<long>(getpid());
    }
  }
#endif
  return PyBool_FromLong(b->fd >= 0);
}

// `idle(period)`: the feeder's wait, the GIL released. Returns when `wake` was called, when an item was queued
// (`flag`, or a seal by the launcher) or when the buffer's oldest launch has waited three quarters of `period`,
// looked at every quarter: so a launch waits at most about `period` before the feeder seals and sends it.
PyObject* batch_idle(PyObject* self, PyObject* arg) {
  double period = PyFloat_AsDouble(arg);
  if (period == -1.0 && PyErr_Occurred()) return nullptr;
  if (!(period > 0.0)) {
    PyErr_SetString(PyExc_ValueError, "idle(period): a period in seconds, above 0");
    return nullptr;
  }
  BatchShared* s = reinterpret_cast<Batch*>(self)->shared;
  auto tick = std::chrono::nanoseconds(static_cast<int64_t>(period * 2.5e8) + 1);
  int64_t due = static_cast<int64_t>(period * 7.5e8);
  Py_BEGIN_ALLOW_THREADS
  {  // the lock is let go before the GIL is taken back: `wake` takes it holding the GIL
    std::unique_lock<std::mutex> held(s->lock);
    while (true) {
      if (s->woken) {
        s->woken_returns.fetch_add(1, std::memory_order_relaxed);
        break;
      }
      if (s->flagged.load(std::memory_order_acquire)) {
        s->flagged_returns.fetch_add(1, std::memory_order_relaxed);
        break;
      }
      int64_t first = s->first_ns.load(std::memory_order_relaxed);
      if (first != 0 && steady_ns() - first >= due) {
        s->aged_returns.fetch_add(1, std::memory_order_relaxed);
        break;
      }
      s->woke.wait_for(held, tick);
    }
    s->woken = false;
    s->flagged.store(false, std::memory_order_release);
  }
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

// `wake()`: the feeder's `idle` returns now (or at once when it is not waiting).
PyObject* batch_wake(PyObject* self, PyObject*) {
  BatchShared* s = reinterpret_cast<Batch*>(self)->shared;
  {
    std::lock_guard<std::mutex> held(s->lock);
    s->woken = true;
  }
  s->woke.notify_all();
  Py_RETURN_NONE;
}

// `flag()`: an item was queued; the feeder's `idle` returns at its next look (it is not woken now: a program
// that queues an item a launch must not wake the feeder a launch).
PyObject* batch_flag(PyObject* self, PyObject*) {
  reinterpret_cast<Batch*>(self)->shared->flagged.store(true, std::memory_order_release);
  Py_RETURN_NONE;
}

// `add(n, template, started, duration, grid, values)`: the item packed into the batch as a steady launch's is
// (`launch_pack.pack`'s arguments); False when it does not pack. For tests of the encoder.
PyObject* batch_add_py(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 6) {
    PyErr_SetString(PyExc_TypeError, "add(n, template, started, duration, grid, values)");
    return nullptr;
  }
  FlatItem item;
  if (!item.read(args[0], args[1], args[2], args[3], args[4], args[5])) {
    if (PyErr_Occurred()) return nullptr;
    Py_RETURN_FALSE;
  }
  if (batch_add(reinterpret_cast<Batch*>(self), item.head, item.at, item.took, item.words) < 0) return nullptr;
  Py_RETURN_TRUE;
}

PyObject* batch_launches(PyObject* self, void*) {
  return PyLong_FromUnsignedLong(reinterpret_cast<Batch*>(self)->launches);
}

PyObject* batch_bytes(PyObject* self, void*) {
  Py_ssize_t size = reinterpret_cast<Batch*>(self)->size;
  return PyLong_FromSsize_t(size ? size - kFrameRoom : 0);
}

PyObject* batch_sent_launches(PyObject* self, void*) {
  return PyLong_FromLongLong(reinterpret_cast<Batch*>(self)->sent_launches);
}

PyObject* batch_sent_batches(PyObject* self, void*) {
  return PyLong_FromLongLong(reinterpret_cast<Batch*>(self)->sent_batches);
}

// `stats`: how batches went (sent directly, or not and why) and why the feeder woke, as a dict of counts (see
// `Batch`, `BatchShared`).
PyObject* batch_stats(PyObject* self, void*) {
  Batch* b = reinterpret_cast<Batch*>(self);
  BatchShared* s = b->shared;
  return Py_BuildValue("{sLsLsLsLsLsLsLsLsL}", "sent_batches", b->sent_batches, "sent_launches", b->sent_launches,
                       "held_busy", b->held_busy, "held_queued", b->held_queued, "held_full_pipe",
                       b->held_full_pipe, "held_unattached", b->held_unattached, "idle_woken",
                       s->woken_returns.load(std::memory_order_relaxed), "idle_flagged",
                       s->flagged_returns.load(std::memory_order_relaxed), "idle_aged",
                       s->aged_returns.load(std::memory_order_relaxed));
}

PyObject* batch_get_send_age(PyObject* self, void*) {
  return PyFloat_FromDouble(reinterpret_cast<Batch*>(self)->send_age);
}

int batch_set_send_age(PyObject* self, PyObject* value, void*) {
  double age = value == nullptr ? 0.0 : PyFloat_AsDouble(value);
  if (age == -1.0 && PyErr_Occurred()) return -1;
  if (!(age >= 0.0)) {
    PyErr_SetString(PyExc_ValueError, "send_age: seconds, 0 or more");
    return -1;
  }
  reinterpret_cast<Batch*>(self)->send_age = age;
  return 0;
}

PyObject* batch_get_busy(PyObject* self, void*) { return PyBool_FromLong(reinterpret_cast<Batch*>(self)->busy); }

int batch_set_busy(PyObject* self, PyObject* value, void*) {
  int busy = value == nullptr ? 0 : PyObject_IsTrue(value);
  if (busy < 0) return -1;
  reinterpret_cast<Batch*>(self)->busy = busy != 0;
  return 0;
}

PyMethodDef batch_methods[] = {
    {"seal", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(batch_seal_py)), METH_FASTCALL,
     "seal(append, queued): queue the launches written so far as one item (append(bytes), next(queued));"
     " True when there were any."},
    {"send", batch_send_py, METH_O,
     "send(items): write the launches so far into the attached pipe as one parts frame when `items` (the"
     " writer's queue) is empty, the feeder is not sending and the pipe has room; True when it did."},
    {"attach", batch_attach, METH_O,
     "attach(fd): full batches are written into pipe fd directly (-1: never); True when they will be."},
    {"idle", batch_idle, METH_O,
     "idle(period): wait, the GIL released, until woken, flagged, or a launch has waited 3/4 of period."},
    {"wake", batch_wake, METH_NOARGS, "wake(): idle returns now."},
    {"flag", batch_flag, METH_NOARGS, "flag(): an item was queued; idle returns at its next look."},
    {"add", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(batch_add_py)), METH_FASTCALL,
     "add(n, template, started, duration, grid, values): pack the item in as a steady launch's (launch_pack.pack's"
     " arguments); False when it does not pack. For tests of the encoder."},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef batch_getset[] = {
    {"launches", batch_launches, nullptr, "Launches written since the last seal.", nullptr},
    {"nbytes", batch_bytes, nullptr, "Bytes written since the last seal, the batch's head included (0: none).",
     nullptr},
    {"sent_launches", batch_sent_launches, nullptr, "Launches sent directly into the pipe so far.", nullptr},
    {"sent_batches", batch_sent_batches, nullptr, "Batches sent directly into the pipe so far.", nullptr},
    {"busy", batch_get_busy, batch_set_busy, "The writer's feeder is sending: no direct send meanwhile.", nullptr},
    {"send_age", batch_get_send_age, batch_set_send_age,
     "Seconds after which the launcher sends a batch not yet full (its oldest launch's age; 0: only full ones).",
     nullptr},
    {"stats", batch_stats, nullptr,
     "Counts: batches and launches sent directly; sends declined, by why (held_busy, held_queued,"
     " held_full_pipe, held_unattached: a full batch is then queued); idle's returns, by why (idle_woken,"
     " idle_flagged, idle_aged).",
     nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

// The item's bytes when the words were not packed (into the batch): packed from the list of values (`values`),
// else, when a value does not fit the packed form, marshalled as `submit_flat` does (format 2). A new reference,
// or nullptr and an exception. Cold: a steady launch's values fit its words.
TL_COLD PyObject* item_data(PyObject* number, Stamp& started, Stamp& duration, Grid& grid, PyObject* values,
                            const Words& words, Launched& n) {
  if (values != nullptr) {
    PyObject* resolved = grid.get();
    PyObject* s = resolved ? started.get() : nullptr;
    PyObject* d = s ? duration.get() : nullptr;
    PyObject* id = d ? n.get() : nullptr;
    if (id == nullptr) return nullptr;
    PyObject* packed = pack_flat(id, number, s, d, resolved, values);
    if (packed != nullptr || PyErr_Occurred()) return packed;
  }
  Ref list(values != nullptr ? Py_NewRef(values) : list_of(words));
  PyObject* resolved = list ? grid.get() : nullptr;
  PyObject* s = resolved ? started.get() : nullptr;
  PyObject* d = s ? duration.get() : nullptr;
  PyObject* id = d ? n.get() : nullptr;
  if (id == nullptr) return nullptr;
  Ref item(PyTuple_Pack(7, g_names.m, id, number, s, d, resolved, list.get()));
  return item ? PyMarshal_WriteObjectToString(item.get(), 2) : nullptr;
}

// The program's wait when the queue holds more than `limit` items: the writer's `_wait_for_feeder(limit)`.
int wait_if_full(PyObject* writer, PyObject* items, PyObject* limit) {
  Py_ssize_t size = PyObject_Size(items);
  Py_ssize_t most = PyLong_AsSsize_t(limit);
  if (size < 0 || (most == -1 && PyErr_Occurred())) return -1;
  if (size <= most) return 0;
  Ref waited(PyObject_CallMethodOneArg(writer, g_names.wait_for_feeder, limit));
  return waited ? 0 : -1;
}

// `ProcessWriter.submit_flat(number, started, duration, grid, values)`'s steps from the writer's
// `flat_parts()` (writer, numbers, batch, items.append, items, queued, limit, batch_bytes): the next launch
// number; the item ("m", n, ...) packed into the batch (`Batch`, from `words` when `values` is nullptr), which
// is sent into the pipe (`batch_send`) or else sealed into the queue once it holds `batch_bytes`; or, when the
// item does not pack (a value past 64 bits; `values` given), the batch sealed and the item appended to the
// queue packed from the list or marshalled in format 2 as `submit_flat` does. Either way a queued item is
// counted by `queued` and flagged for the feeder (`flag`), and the program waits for the feeder when the queue
// holds more than `limit` items. 0 with the launch number taken into `n`, or -1 and an exception.
int queue_flat(PyObject* parts, PyObject* number, Stamp& started, Stamp& duration, Grid& grid, PyObject* values,
               const Words& words, Launched& n) {
  if (!PyTuple_CheckExact(parts) || PyTuple_GET_SIZE(parts) != 8 || !Py_IS_TYPE(PyTuple_GET_ITEM(parts, 2), &BatchType)) {
    PyErr_SetString(PyExc_TypeError, "flat_parts() must give 8 items, the third a LaunchBatch");
    return -1;
  }
  PyObject* writer = PyTuple_GET_ITEM(parts, 0);
  Batch* batch = reinterpret_cast<Batch*>(PyTuple_GET_ITEM(parts, 2));
  PyObject *append = PyTuple_GET_ITEM(parts, 3), *items = PyTuple_GET_ITEM(parts, 4);
  PyObject *queued = PyTuple_GET_ITEM(parts, 5), *limit = PyTuple_GET_ITEM(parts, 6);
  if (n.take(PyTuple_GET_ITEM(parts, 1)) < 0) return -1;
  int64_t head[5];
  if (values == nullptr && n.fits && packed_head(n.index, number, started, duration, grid, words, head)) {
    if (batch_add(batch, head, started, duration, words) < 0) return -1;
    Py_ssize_t full = PyLong_AsSsize_t(PyTuple_GET_ITEM(parts, 7));
    if (full == -1 && PyErr_Occurred()) return -1;
    if (batch->size - kFrameRoom < full) {
      // Not full: sent only once its oldest launch has waited `send_age` (before the feeder's `idle` would
      // return for it), and only directly; kept for later when it cannot be sent now.
      if (!(batch->send_age > 0.0 && started.here && started.seconds - batch->first_started >= batch->send_age))
        return 0;
      int sent = batch_send(batch, items);
      return sent < 0 ? -1 : 0;
    }
    int sent = batch_send(batch, items);
    if (sent != 0) return sent < 0 ? -1 : 0;
    return batch_seal(batch, append, queued, true) < 0 ? -1 : wait_if_full(writer, items, limit);
  }
  if (PyErr_Occurred()) return -1;
  if (batch_seal(batch, append, queued, true) < 0) return -1;  // the launches before this one first
  Ref data(item_data(number, started, duration, grid, values, words, n));
  if (!data || queue_item(append, queued, data.get()) < 0) return -1;
  batch->shared->flagged.store(true, std::memory_order_release);
  return wait_if_full(writer, items, limit);
}

double seconds(PyObject* clock, Ref& holder) {
  holder.reset(PyObject_CallNoArgs(clock));
  return holder ? PyFloat_AsDouble(holder.get()) : -1.0;
}

#if defined(__linux__)
// `time.time()` (CLOCK_REALTIME) and `time.perf_counter()` (CLOCK_MONOTONIC) as CPython computes them on
// Linux: the clock's nanoseconds, converted to seconds as `_PyTime_AsSecondsDouble` does.
double clock_seconds(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  int64_t ns = static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  if (ns % 1000000000 == 0) return static_cast<double>(ns / 1000000000);
  return static_cast<double>(ns) / 1e9;
}

// Whether `fn` is the builtin `name` of the `time` module (not a replacement set on the module).
bool time_builtin(PyObject* fn, const char* name) {
  if (!PyCFunction_Check(fn)) return false;
  PyObject* self = PyCFunction_GET_SELF(fn);
  const char* module = self != nullptr && PyModule_Check(self) ? PyModule_GetName(self) : nullptr;
  if (module == nullptr) PyErr_Clear();
  return module != nullptr && std::strcmp(module, "time") == 0 &&
         std::strcmp(reinterpret_cast<PyCFunctionObject*>(fn)->m_ml->ml_name, name) == 0;
}

// Whether `time_fn` and `perf` are the time module's own `time` and `perf_counter`.
int stock_clocks(PyObject* time_fn, PyObject* perf) {
  return time_builtin(time_fn, "time") && time_builtin(perf, "perf_counter");
}
#else
double clock_seconds(int) { return 0.0; }
int stock_clocks(PyObject*, PyObject*) { return 0; }
#endif

// The runner's call: Triton's own run directly (`triton_run`), else the router's runner.
PyObject* run_launch(const Config& f, LaunchArgs& a, PyObject* probe) {
  if (f[TRITON_RUN] == Py_None) {
    PyObject* args = a.tuple();
    PyObject* kwargs = args ? a.dict() : nullptr;
    return kwargs ? call_n(f[RUNNER], {a.jit, args, probe, kwargs}) : nullptr;
  }
  if (!a.vector()) return run_triton(f[TRITON_RUN], a.jit, a.args.get(), probe, a.kwargs.get());
  // `obj.run(*args, grid=probe, warmup=False, **kwargs)` with the names the call came with
  size_t n = static_cast<size_t>(1 + a.nargs + a.nkw());
  PyObject* local[64];  // most calls: no heap allocation
  std::vector<PyObject*> heap(n > 64 ? n : 0);
  PyObject** stack = n > 64 ? heap.data() : local;
  stack[0] = a.jit;
  for (Py_ssize_t i = 0; i < a.nargs + a.nkw(); ++i) stack[i + 1] = a.vec[i];
  stack[1 + a.nargs + a.grid_at] = probe;
  stack[1 + a.nargs + a.warmup_at] = Py_False;
  return PyObject_Vectorcall(f[TRITON_RUN], stack, static_cast<size_t>(1 + a.nargs), a.kwnames);
}

// The calls a launch hands to Python: `slow(jit, args, kwargs)` (the router's `launch`, the launcher not
// configured), `rest(jit, args, grid, kwargs)` (before the run: the router's `_launch`) and `after(...)` (after
// it: the router's `_after`). Cold: a steady launch makes none of them.
TL_COLD PyObject* to_slow(PyObject* slow, LaunchArgs& a) {
  PyObject* args = a.tuple();
  Ref kwargs(args ? a.whole_dict() : nullptr);
  return kwargs ? call_n(slow, {a.jit, args, kwargs.get()}) : nullptr;
}

TL_COLD PyObject* to_rest(PyObject* rest, LaunchArgs& a, PyObject* grid) {
  PyObject* args = a.tuple();
  PyObject* kwargs = args ? a.dict() : nullptr;
  return kwargs ? call_n(rest, {a.jit, args, grid, kwargs}) : nullptr;
}

TL_COLD PyObject* to_after(PyObject* after, PyObject* k, LaunchArgs& a, PyObject* grid, PyObject* probe,
                           PyObject* stack, PyObject* result, PyObject* error, Stamp& started, Stamp& duration) {
  PyObject* args = a.tuple();
  PyObject* kwargs = args ? a.dict() : nullptr;
  if (kwargs == nullptr || started.get() == nullptr || duration.get() == nullptr) return nullptr;
  return call_n(after, {k, a.jit, args, grid, probe, kwargs, stack, result, error != nullptr ? error : Py_None,
                        started.obj.get(), duration.obj.get()});
}

// The exception the run raised, normalized and with its traceback set (a new reference: recorded, then re-raised
// unchanged by `after`); nullptr with the exception restored when there is no value. Cold.
TL_COLD PyObject* run_error() {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (value == nullptr) {
    PyErr_Restore(type, value, tb);
    return nullptr;
  }
  if (tb != nullptr) PyException_SetTraceback(value, tb);
  Py_XDECREF(type);
  Py_XDECREF(tb);
  return value;
}

// A launch's grid probe: the launcher's spare one when it has one, its grid set, else a new one (`new_probe`).
// At the end of the launch a probe no one else holds (Triton drops its grid once called; a Python call handed
// it may have kept it) has its slots emptied, dropping what they held as a deallocation would, and becomes the
// spare: a steady launch then allocates and frees no probe. A launch inside the probe's grid function, or a
// finalizer run while the slots are emptied, finds no spare and makes its own.
struct ProbeLease {
  Launcher* l;
  Probe* probe = nullptr;

  ProbeLease(Launcher* launcher, PyObject* grid) : l(launcher) {
    PyObject* spare = l->spare_probe;
    if (spare != nullptr && Py_REFCNT(spare) == 1) {
      l->spare_probe = nullptr;
      probe = reinterpret_cast<Probe*>(spare);
      probe->grid = Py_NewRef(grid);
    } else {
      probe = new_probe(grid);
    }
  }
  ~ProbeLease() {
    PyObject* p = reinterpret_cast<PyObject*>(probe);
    if (p == nullptr) return;
    if (Py_REFCNT(p) != 1 || l->spare_probe != nullptr || PyErr_Occurred()) {
      Py_DECREF(p);
      return;
    }
    Py_CLEAR(probe->grid);  // each may run a finalizer, which may launch
    Py_CLEAR(probe->bound);
    Py_CLEAR(probe->value);
    if (l->spare_probe == nullptr && Py_REFCNT(p) == 1 && l->slow != nullptr) l->spare_probe = p;
    else Py_DECREF(p);
  }
  ProbeLease(const ProbeLease&) = delete;
  ProbeLease& operator=(const ProbeLease&) = delete;
};

// `caller`: the launch's frame not yet on the thread's stack (`CallerFrame`), pushed before any path but the
// steady one reads the stack; nullptr for every other launch.
PyObject* launch(Launcher* l, LaunchArgs& a, CallerFrame* caller) {
  TL_STAMP(entered);
  if (l->slow == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "a cleared launcher");
    return nullptr;
  }
  if (l->config == nullptr || (!a.vector() && !PyDict_CheckExact(a.kwargs.get())))
    return caller_pushed(caller) ? to_slow(l->slow, a) : nullptr;
  Ref config(Py_NewRef(l->config));
  const Config f{config.get()};
  Frames frames{reinterpret_cast<PyTypeObject*>(f[FRAME_CLASS]), {}};
  std::memcpy(frames.offsets, l->frame_offsets, sizeof(frames.offsets));
  Slots slots;
  slots.kernel = reinterpret_cast<PyTypeObject*>(f[KERNEL_CLASS]);
  std::memcpy(slots.kernel_at, l->kernel_offsets, sizeof(slots.kernel_at));
  slots.plan = reinterpret_cast<PyTypeObject*>(f[PLAN_CLASS]);
  slots.order_at = l->plan_offset;
  PyObject* jit = a.jit;
  Ref grid;
  if (a.vector()) {
    grid.reset(Py_NewRef(a.vec[a.nargs + a.grid_at]));
  } else {  // `kwargs` is the dict the interception's `run(**kwargs)` made for this call: ours to change.
    PyObject* kwargs = a.kwargs.get();
    grid.reset(PyDict_GetItemWithError(kwargs, g_names.grid));
    if (grid) {
      Py_INCREF(grid.get());
      if (PyDict_DelItem(kwargs, g_names.grid) < 0) return nullptr;
    } else {
      if (PyErr_Occurred()) return nullptr;
      grid.reset(Py_NewRef(Py_None));
    }
    PyObject* warmup = PyDict_GetItemWithError(kwargs, g_names.warmup);
    if (warmup != nullptr ? PyDict_DelItem(kwargs, g_names.warmup) < 0 : PyErr_Occurred() != nullptr)
      return nullptr;
  }
  const size_t place = tilelens_native::address_slot<Launcher::kSeenBits>(jit);  // in `seen` and `kept`
  Ref stack(l->local_dict.get(f[LOCAL], g_names.stack));
  Ref k, last;
  bool mine = stack && PyList_CheckExact(stack.get());
  if (mine && (PyList_GET_SIZE(stack.get()) || caller != nullptr)) {  // inside a tuning: a benchmark launch is Python's
    Ref depth(l->thread_dict.get(f[THREAD], g_names.bench_depth));
    long d = depth ? PyLong_AsLong(depth.get()) : -1;
    mine = d == 0;
  }
  if (mine) {
    PyObject*& seen = l->seen[place];
    Ref found;
    if (seen != nullptr && Py_TYPE(seen) == slots.kernel &&
        *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(seen) + slots.kernel_at[K_JIT]) == jit) {
      found.reset(Py_NewRef(seen));
    } else {
      Ref id(PyLong_FromVoidPtr(jit));
      PyObject* in_dict = id ? PyDict_GetItemWithError(f[KERNELS], id.get()) : nullptr;
      if (in_dict != nullptr) {
        found.reset(Py_NewRef(in_dict));
        Py_XSETREF(seen, Py_NewRef(in_dict));
      }
    }
    PyObject* known = found.get();
    if (known != nullptr) {
      k.reset(Py_NewRef(known));
      Ref kjit(slot_or_attr(known, slots.kernel, slots.kernel_at[K_JIT], g_names.jit));
      last.reset(kjit && kjit.get() == jit
                     ? slot_or_attr(known, slots.kernel, slots.kernel_at[K_LAST_TEMPLATE], g_names.last_template)
                     : nullptr);
    }
    mine = last && PyTuple_CheckExact(last.get()) && PyTuple_GET_SIZE(last.get()) == 7;
  }
  if (!mine) {
    PyErr_Clear();
    ++l->fallbacks;
    return caller_pushed(caller) ? to_rest(f[REST], a, grid.get()) : nullptr;
  }
  ProbeLease lease(l, grid.get());
  Probe* probe = lease.probe;
  if (probe == nullptr) return nullptr;
  PyObject* probe_obj = reinterpret_cast<PyObject*>(probe);
  Stamp started, duration;
  Ref clock;
  double t0;
  if (l->native_clocks) {
    started.read(clock_seconds(CLOCK_REALTIME));
    t0 = clock_seconds(CLOCK_MONOTONIC);
  } else {
    started.obj.reset(PyObject_CallNoArgs(f[TIME]));
    t0 = started.obj ? seconds(f[PERF], clock) : -1.0;
    if (!started.obj) return nullptr;
  }
  if (PyErr_Occurred()) return nullptr;
  TL_PART(PART_LAUNCH_BEFORE, entered);
  TL_STAMP(running);
  Ref result(run_launch(f, a, probe_obj));
  TL_PART(PART_RUN, running);
  TL_STAMP(ran);
  Ref error;
  if (!result) {  // recorded, then re-raised unchanged (with its traceback) by `after`
    error.reset(run_error());
    if (!error) return nullptr;
    result.reset(Py_NewRef(Py_None));
  }
  double t1 = l->native_clocks ? clock_seconds(CLOCK_MONOTONIC) : seconds(f[PERF], clock);
  if (PyErr_Occurred()) return nullptr;
  duration.read(t1 - t0);
  if (!error && probe->bound != nullptr) {
    Ref number, values;
    Grid resolved;
    Words words;  // on this call's stack: a finalizer run meanwhile may launch (and capture) too
    TL_PART(PART_AFTER_RUN, ran);
    int ok = steady(f, frames, slots, k.get(), last.get(), probe->bound, result.get(), a, stack.get(), caller, probe,
                    number, words, values, resolved, l->kept[place], l->plans_kept, l->kept_hits);
    if (ok == 1) {
      TL_STAMP(queueing);
      Launched n;  // the launch's number: its handle
      if (f[QUEUE] != Py_None) {
        if (queue_flat(f[QUEUE], number.get(), started, duration, resolved, values.get(), words, n) < 0)
          return nullptr;
      } else {
        if (resolved.get() == nullptr || started.get() == nullptr || duration.get() == nullptr) return nullptr;
        n.obj.reset(call_n(f[FLAT], {number.get(), started.obj.get(), duration.obj.get(), resolved.get(),
                                     values.get()}));
        if (!n.obj) return nullptr;
      }
      TL_PART(PART_QUEUE, queueing);
      TL_STAMP(attaching);
      // A caller frame wants no handle (`CallerFrame`): not pushed, it is the innermost frame, so none is attached.
      bool pending = caller != nullptr && caller->frame == nullptr;
      if (!pending && PyList_GET_SIZE(stack.get()) && attach(frames, stack.get(), [&n] { return n.get(); }) < 0)
        return nullptr;
      ++l->steady;
      TL_PART(PART_ATTACH, attaching);
      return result.release();
    }
    PyErr_Clear();
  }
  ++l->fallbacks;
  if (!caller_pushed(caller)) return nullptr;
  return to_after(f[AFTER], k.get(), a, grid.get(), probe_obj, stack.get(), result.get(), error.get(), started,
                  duration);
}

PyObject* launcher_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  if (n != 3 || (kwnames != nullptr && PyTuple_GET_SIZE(kwnames))) {
    PyErr_SetString(PyExc_TypeError, "a launcher takes (jit, args, kwargs)");
    return nullptr;
  }
  try {
    LaunchArgs a;
    a.jit = args[0];
    a.args.reset(Py_NewRef(args[1]));
    a.kwargs.reset(Py_NewRef(args[2]));
    if (!PyTuple_Check(args[1]) || !PyDict_Check(args[2])) {
      PyErr_SetString(PyExc_TypeError, "a launcher takes (jit, args tuple, kwargs dict)");
      return nullptr;
    }
    return launch(reinterpret_cast<Launcher*>(self), a, nullptr);
  } catch (...) {  // nothing here throws; a C++ exception must not cross into Python
    PyErr_SetString(PyExc_RuntimeError, "TileLens's compiled launcher failed");
    return nullptr;
  }
}

PyObject* launcher_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject* slow;
  if (!PyArg_ParseTuple(args, "O:Launcher", &slow)) return nullptr;
  Launcher* l = PyObject_GC_New(Launcher, type);
  if (l == nullptr) return nullptr;
  l->vectorcall = launcher_vectorcall;
  l->slow = Py_NewRef(slow);
  l->config = nullptr;
  l->steady = l->fallbacks = 0;
  std::memset(l->frame_offsets, 0, sizeof(l->frame_offsets));
  std::memset(l->kernel_offsets, 0, sizeof(l->kernel_offsets));
  l->plan_offset = 0;
  l->local_dict = tilelens_native::LocalDict{0, nullptr};
  l->thread_dict = tilelens_native::LocalDict{0, nullptr};
  l->native_clocks = false;
  for (PyObject*& k : l->seen) k = nullptr;
  for (KernelKept& c : l->kept) c = KernelKept{};
  l->plans_kept = 0;
  l->kept_hits = 0;
  l->spare_probe = nullptr;
  PyObject_GC_Track(l);
  return reinterpret_cast<PyObject*>(l);
}

// configure(rest, after, kernels, metadata, grids, local, templates, flat, runner, grid_of, testid, thread,
// time, perf_counter, triton_run, queue, frame_class, kernel_class, plan_class) enables; configure() disables
// (every launch then goes to `slow`). `triton_run`: Triton's `JITFunction.run`, called directly when the
// runner is `compat.run_compiled`, else None; `queue`: the writer's `flat_parts()` when `flat` is its own
// `submit_flat`, whose steps `queue_flat` then does, else None; `frame_class`, `kernel_class`, `plan_class`:
// `compiled_frames.Frame`, `compiled_kernel.RoutedKernel`, `compiled_templates.FlatPlan` (slots only).
PyObject* launcher_configure(PyObject* self, PyObject* args) {
  Launcher* l = reinterpret_cast<Launcher*>(self);
  Py_ssize_t n = PyTuple_GET_SIZE(args);
  if (n != 0 && n != NFIELDS) {
    PyErr_Format(PyExc_TypeError, "configure() takes 0 or %d arguments", static_cast<int>(NFIELDS));
    return nullptr;
  }
  l->local_dict.reset();  // another LOCAL and THREAD, or none
  l->thread_dict.reset();
  for (PyObject*& k : l->seen) Py_CLEAR(k);  // another KERNELS, or none
  for (KernelKept& c : l->kept) c.clear();
  if (n == 0 || g_tensor_type == nullptr) {
    Py_CLEAR(l->config);
    Py_RETURN_NONE;
  }
  const Config f{args};
  if (!PyDict_Check(f[KERNELS]) || !PyDict_Check(f[METADATA]) || !PyDict_Check(f[GRIDS])) {
    PyErr_SetString(PyExc_TypeError, "kernels, metadata and grids must be dicts");
    return nullptr;
  }
  Py_ssize_t offsets[tilelens_native::NFRAME];
  if (!tilelens_native::frame_offsets(f[FRAME_CLASS], offsets)) return nullptr;
  Py_ssize_t kernel_offsets[NKERNEL], plan_offset;
  if (!tilelens_native::slot_offsets(f[KERNEL_CLASS], kKernelSlots, NKERNEL, kernel_offsets, "kernel") ||
      !tilelens_native::slot_offsets(f[PLAN_CLASS], kPlanSlots, 1, &plan_offset, "plan"))
    return nullptr;
  std::memcpy(l->frame_offsets, offsets, sizeof(offsets));
  std::memcpy(l->kernel_offsets, kernel_offsets, sizeof(kernel_offsets));
  l->plan_offset = plan_offset;
  int clocks = stock_clocks(f[TIME], f[PERF]);
  if (clocks < 0) return nullptr;
  l->native_clocks = clocks == 1;
  Py_XSETREF(l->config, Py_NewRef(args));
  Py_RETURN_NONE;
}

PyObject* launcher_enabled(PyObject* self, void*) {
  return PyBool_FromLong(reinterpret_cast<Launcher*>(self)->config != nullptr);
}

PyMethodDef launcher_methods[] = {
    {"configure", launcher_configure, METH_VARARGS, "configure(rest, after, kernels, ...) or configure()"},
    {nullptr, nullptr, 0, nullptr}};

PyMemberDef launcher_members[] = {
    {"steady", T_PYSSIZET, offsetof(Launcher, steady), READONLY, "launches finished here"},
    {"fallbacks", T_PYSSIZET, offsetof(Launcher, fallbacks), READONLY, "launches given to Python"},
    {"plans_kept", T_PYSSIZET, offsetof(Launcher, plans_kept), READONLY,
     "launches whose options were read through the plan kept for their kernel and keyword names"},
    {"kept", T_PYSSIZET, offsetof(Launcher, kept_hits), READONLY,
     "launches found among their kernel's kept templates (KeptTemplates: a diagnostic)"},
    {nullptr, 0, 0, 0, nullptr}};

PyObject* launcher_spare_probe(PyObject* self, void*) {
  PyObject* spare = reinterpret_cast<Launcher*>(self)->spare_probe;
  return Py_NewRef(spare != nullptr ? spare : Py_None);
}

PyGetSetDef launcher_getset[] = {
    {"enabled", launcher_enabled, nullptr, "whether launches are taken here", nullptr},
    {"spare_probe", launcher_spare_probe, nullptr,
     "the emptied grid probe the next launch takes (ProbeLease: a diagnostic), or None", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

// `PART_NAMES[part]` names `tilelens_native::Part` `part` (keep in step with the enum).
const char* const PART_NAMES[tilelens_native::NPARTS] = {
    "intercept_launch", "intercept_tune", "tune_before", "tune_run", "tune_after", "launch_before",
    "run",              "after_run",      "capture",     "metadata", "node",      "kept",
    "last",             "lookup",         "grid",        "queue",    "attach",    "caller_before",
    "caller_after"};

// `profile(reset)`: None in an ordinary build; in a profiling build a dict part name -> (ticks, calls) of the
// time-stamp counter summed since the last reset, and the counts set to zero when `reset` is true.
PyObject* profile(PyObject*, PyObject* reset) {
#if TILELENS_PROFILED
  int clear = PyObject_IsTrue(reset);
  if (clear < 0) return nullptr;
  Ref out(PyDict_New());
  if (!out) return nullptr;
  for (int i = 0; i < tilelens_native::NPARTS; ++i) {
    Ref item(Py_BuildValue("(KK)", static_cast<unsigned long long>(tilelens_native::g_part_ticks[i]),
                           static_cast<unsigned long long>(tilelens_native::g_part_calls[i])));
    if (!item || PyDict_SetItemString(out.get(), PART_NAMES[i], item.get()) < 0) return nullptr;
    if (clear) tilelens_native::g_part_ticks[i] = tilelens_native::g_part_calls[i] = 0;
  }
  return out.release();
#else
  static_cast<void>(reset);
  Py_RETURN_NONE;
#endif
}

// `ticks()`: the time-stamp counter now (profiling builds), else None: what `profile`'s ticks are counted in.
PyObject* ticks_now(PyObject*, PyObject*) {
#if TILELENS_PROFILED
  return PyLong_FromUnsignedLongLong(tilelens_native::ticks());
#else
  Py_RETURN_NONE;
#endif
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
    {"profile", profile, METH_O, "profile(reset): per-part (ticks, calls) of a profiling build, else None"},
    {"ticks", ticks_now, METH_NOARGS, "ticks(): the time-stamp counter in a profiling build, else None"},
    {"metadata_cleared", metadata_cleared, METH_NOARGS,
     "metadata_cleared(): a router's METADATA dict is cleared just now (launchers look it up again)"},
    {"pack_flat", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(pack_flat_py)), METH_FASTCALL,
     "pack_flat(n, template, started, duration, grid, values) -> bytes | None (launch_pack.pack)"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tilelens_capture", "TileLens's compiled capture", -1, methods};

}  // namespace

bool tilelens_native::is_launcher(PyObject* o) { return Py_IS_TYPE(o, &LauncherType); }

PyObject* tilelens_native::launch_vector(PyObject* launcher, PyObject* const* args, Py_ssize_t nargs,
                                         PyObject* kwnames, CallerFrame* caller) {
  try {
    LaunchArgs a;
    a.jit = args[0];
    a.vec = args + 1;
    a.nargs = nargs - 1;
    a.kwnames = kwnames;
    for (Py_ssize_t i = 0; i < a.nkw(); ++i) {
      PyObject* name = PyTuple_GET_ITEM(kwnames, i);
      if (tilelens_native::is_name(name, g_names.grid)) a.grid_at = i;
      else if (tilelens_native::is_name(name, g_names.warmup)) a.warmup_at = i;
    }
    if (a.grid_at < 0 || a.warmup_at < 0) {  // not `kernel[grid](...)`'s call: the tuple and dict form
      a.grid_at = a.warmup_at = -1;
      PyObject* tuple = a.tuple();
      PyObject* dict = tuple ? a.dict() : nullptr;
      if (dict == nullptr) return nullptr;
      a.vec = nullptr;
    }
    return launch(reinterpret_cast<Launcher*>(launcher), a, caller);
  } catch (...) {  // nothing here throws; a C++ exception must not cross into Python
    PyErr_SetString(PyExc_RuntimeError, "TileLens's compiled launcher failed");
    return nullptr;
  }
}

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
  g_order_name = PyUnicode_InternFromString("order");
  if (g_runtime_name == nullptr || g_constexpr_name == nullptr || g_order_name == nullptr) return nullptr;
  ProbeType.tp_name = "_tilelens_capture.GridProbe";
  ProbeType.tp_basicsize = sizeof(Probe);
  ProbeType.tp_dealloc = probe_dealloc;
  ProbeType.tp_call = PyVectorcall_Call;
  ProbeType.tp_vectorcall_offset = offsetof(Probe, vectorcall);
  ProbeType.tp_new = probe_new;
  ProbeType.tp_members = probe_members;
  ProbeType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
  ProbeType.tp_doc = "The grid a steady launch hands Triton (compiled_frames.GridProbe).";
  if (PyType_Ready(&ProbeType) < 0) return nullptr;
  LauncherType.tp_name = "_tilelens_capture.Launcher";
  LauncherType.tp_basicsize = sizeof(Launcher);
  LauncherType.tp_dealloc = tilelens_native::gc_dealloc;
  LauncherType.tp_traverse = launcher_traverse;
  LauncherType.tp_clear = launcher_clear;
  LauncherType.tp_new = launcher_new;
  LauncherType.tp_call = PyVectorcall_Call;
  LauncherType.tp_vectorcall_offset = offsetof(Launcher, vectorcall);
  LauncherType.tp_methods = launcher_methods;
  LauncherType.tp_members = launcher_members;
  LauncherType.tp_getset = launcher_getset;
  LauncherType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL;
  LauncherType.tp_doc = "A compiled recording's steady launch (see native_capture.cpp).";
  if (PyType_Ready(&LauncherType) < 0) return nullptr;
  CounterType.tp_name = "_tilelens_capture.Counter";
  CounterType.tp_basicsize = sizeof(Counter);
  CounterType.tp_dealloc = counter_dealloc;
  CounterType.tp_iter = PyObject_SelfIter;
  CounterType.tp_iternext = counter_next;
  CounterType.tp_repr = counter_repr;
  CounterType.tp_new = counter_new;
  CounterType.tp_flags = Py_TPFLAGS_DEFAULT;
  CounterType.tp_doc = "Counter(start=0): itertools.count(start) that the compiled launcher advances in place.";
  if (PyType_Ready(&CounterType) < 0) return nullptr;
  BatchType.tp_name = "_tilelens_capture.LaunchBatch";
  BatchType.tp_basicsize = sizeof(Batch);
  BatchType.tp_dealloc = batch_dealloc;
  BatchType.tp_new = batch_new;
  BatchType.tp_methods = batch_methods;
  BatchType.tp_getset = batch_getset;
  BatchType.tp_flags = Py_TPFLAGS_DEFAULT;
  BatchType.tp_doc = "LaunchBatch(): steady launches packed for the writer process, queued as one item (launch_pack).";
  if (PyType_Ready(&BatchType) < 0) return nullptr;
  const char* names[] = {"grid", "warmup", "stack", "bench_depth", "jit", "last_template", "flat_plan",
                         "options_key", "_current", "tuner", "layer", "best_config", "key", "key_values",
                         "args", "positions", "heuristics", "launch", "number", "numbers", "option_plans", "m",
                         "_wait_for_feeder"};
  PyObject** slots[] = {&g_names.grid, &g_names.warmup, &g_names.stack, &g_names.bench_depth, &g_names.jit,
                        &g_names.last_template, &g_names.flat_plan, &g_names.options_key, &g_names.current,
                        &g_names.tuner, &g_names.layer, &g_names.best_config, &g_names.key, &g_names.key_values,
                        &g_names.args, &g_names.positions,
                        &g_names.heuristics, &g_names.launch, &g_names.number, &g_names.numbers,
                        &g_names.option_plans, &g_names.m, &g_names.wait_for_feeder};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); ++i) {
    *slots[i] = PyUnicode_InternFromString(names[i]);
    if (*slots[i] == nullptr) return nullptr;
  }
  PyObject* m = PyModule_Create(&module);
  if (m == nullptr) return nullptr;
  Py_INCREF(&SigType);
  if (PyModule_AddObject(m, "Sig", reinterpret_cast<PyObject*>(&SigType)) < 0) {
    Py_DECREF(&SigType);
    Py_DECREF(m);
    return nullptr;
  }
  PyTypeObject* types[] = {&ProbeType, &LauncherType, &CounterType, &BatchType};
  for (PyTypeObject* t : types) {
    Py_INCREF(t);
    if (PyModule_AddObject(m, t->tp_name + std::strlen("_tilelens_capture."), reinterpret_cast<PyObject*>(t)) < 0) {
      Py_DECREF(t);
      Py_DECREF(m);
      return nullptr;
    }
  }
  if (tilelens_native::add_call_types(m) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
