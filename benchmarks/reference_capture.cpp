// The bench's "native" reference (benchmarks/reference_native.py; issue 15): the least a launch recorder
// written in C does, to measure what such a recorder costs a launch-bound step, beside TileLens.
//
// `wrap(run)` returns an object to set as `JITFunction.run` (a method descriptor with vectorcall, so
// `jit.run(...)` calls it without a bound method). Per call it writes one record of machine words into a ring,
// then calls `run` with the same arguments and returns its result (or its exception) unchanged:
//
//   [kMark, words in the record, jit address, kwnames slot, values, grid dims (3 words), grid known,
//    started (float64 bits, CLOCK_REALTIME), duration (float64 bits), then per value its tag and payload]
//
// A value is a positional argument after `self` or a keyword argument other than `grid` (autotuners and
// heuristics pass their chosen config and values as keyword arguments, so the record has them without an
// interception of the autotuner). Tags: kTensor (dtype, device type, device index, dims; sizes; strides;
// storage offset, storage pointer, storage bytes), kInt, kFloat (bits), kBool, kNone, kOther (the object's
// address: a recorder would intern it). The grid is the keyword argument named by the interned "grid" (as
// Triton's `kernel[grid](...)` passes it). A callable grid is replaced for the call by a probe kept per thread
// (no allocation a launch) that calls it and writes the dims it returns; a tuple grid is read directly.
//
// What it leaves out, on purpose: templates, checks, queueing to another process, autotuner frames, pytest
// node ids. Nothing is sent; the ring is overwritten when full. A record is built on the call's stack and
// copied into the ring after the launch, so a launch on another thread (Triton releases the GIL around the
// driver call) never interleaves with it. A launch that does not fit a record (more than kMaxValues values or
// kMaxWords words), or one started from inside a grid function, is passed through without a record.
//
// Invariants: nothing here changes or keeps a tensor or an argument; the GIL is held whenever Python objects
// are touched; the wrapped call sees exactly the arguments it was given except the callable grid, which it
// sees through the probe (called with the same arguments, its result returned unchanged).

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <cstring>
#include <ctime>

namespace {

constexpr uint64_t kMark = 0x7e1e1e5ca9ULL;
enum Tag : uint64_t { kTensor = 1, kInt = 2, kFloat = 3, kBool = 4, kNone = 5, kOther = 6 };
constexpr size_t kRingWords = size_t{1} << 20;  // 8 MiB
constexpr Py_ssize_t kMaxValues = 64;
constexpr size_t kMaxWords = 2048;
constexpr int kNames = 64;  // kwnames tuples kept (by identity) so that a record names its keyword values

uint64_t* g_ring = nullptr;
size_t g_pos = 0;        // next word written
uint64_t g_records = 0;  // records written since `reset`
bool g_wrapped = false;  // the ring was overwritten since `reset`
PyObject* g_tensor_type = nullptr;
PyObject* g_grid = nullptr;  // the interned "grid"
PyObject* g_names[kNames];   // owned kwnames tuples
int g_nnames = 0;

struct Record {
  uint64_t w[kMaxWords];
  size_t n = 0;
  bool full = false;
  void put(uint64_t x) {
    if (n < kMaxWords) w[n++] = x;
    else full = true;
  }
};

uint64_t bits(double d) {
  uint64_t b;
  std::memcpy(&b, &d, sizeof(b));
  return b;
}

double now(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The slot of `kwnames` among the kept tuples (by identity; kept on first sight), or kNames when full.
uint64_t name_slot(PyObject* kwnames) {
  if (kwnames == nullptr) return kNames + 1;
  for (int i = 0; i < g_nnames; ++i)
    if (g_names[i] == kwnames) return static_cast<uint64_t>(i);
  if (g_nnames == kNames) return kNames;
  g_names[g_nnames] = Py_NewRef(kwnames);
  return static_cast<uint64_t>(g_nnames++);
}

bool put_tensor(PyObject* v, Record& r) noexcept try {
  const at::Tensor& t = THPVariable_Unpack(v);
  if (!t.defined() || t.layout() != c10::kStrided) return false;
  c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (!impl->has_storage() || impl->has_symbolic_sizes_strides()) return false;
  c10::IntArrayRef sizes = impl->sizes();
  c10::IntArrayRef strides = impl->strides();
  c10::Device device = impl->device();
  r.put(kTensor);
  r.put(static_cast<uint64_t>(t.scalar_type()));
  r.put(static_cast<uint64_t>(device.type()));
  r.put(static_cast<uint64_t>(static_cast<int64_t>(device.index())));
  r.put(sizes.size());
  for (int64_t d : sizes) r.put(static_cast<uint64_t>(d));
  for (int64_t d : strides) r.put(static_cast<uint64_t>(d));
  const c10::Storage& storage = impl->storage();
  r.put(static_cast<uint64_t>(impl->storage_offset()));
  r.put(reinterpret_cast<uintptr_t>(storage.data()));
  r.put(storage.nbytes());
  return true;
} catch (...) {
  return false;
}

void put_value(PyObject* v, Record& r) {
  PyTypeObject* type = Py_TYPE(v);
  if (reinterpret_cast<PyObject*>(type) == g_tensor_type && put_tensor(v, r)) return;
  if (type == &PyLong_Type) {
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow == 0 && !(x == -1 && PyErr_Occurred())) {
      r.put(kInt);
      r.put(static_cast<uint64_t>(x));
      return;
    }
    PyErr_Clear();
  } else if (type == &PyFloat_Type) {
    r.put(kFloat);
    r.put(bits(PyFloat_AS_DOUBLE(v)));
    return;
  } else if (type == &PyBool_Type) {
    r.put(kBool);
    r.put(v == Py_True ? 1 : 0);
    return;
  } else if (v == Py_None) {
    r.put(kNone);
    r.put(0);
    return;
  }
  r.put(kOther);
  r.put(reinterpret_cast<uintptr_t>(v));
}

// A grid function's stand-in: calls `target` and writes the 1-3 ints of the tuple it returns into `out`.
struct Probe {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* target;  // borrowed for the duration of one launch
  uint64_t* out;     // three words of that launch's record
  uint64_t* known;   // set to the number of dims read
};
PyTypeObject ProbeType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// Writes the 1-3 exact ints of `tuple` into `out` and their number into `*known`; leaves both as they were
// (no exception) for anything else.
void read_dims(PyObject* tuple, uint64_t* out, uint64_t* known) {
  if (!PyTuple_CheckExact(tuple) || PyTuple_GET_SIZE(tuple) < 1 || PyTuple_GET_SIZE(tuple) > 3) return;
  Py_ssize_t n = PyTuple_GET_SIZE(tuple);
  uint64_t dims[3];
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* d = PyTuple_GET_ITEM(tuple, i);
    if (!PyLong_CheckExact(d)) return;
    long long x = PyLong_AsLongLong(d);
    if (x == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return;
    }
    dims[i] = static_cast<uint64_t>(x);
  }
  for (Py_ssize_t i = 0; i < n; ++i) out[i] = dims[i];
  *known = static_cast<uint64_t>(n);
}

PyObject* probe_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  Probe* p = reinterpret_cast<Probe*>(self);
  if (p->target == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "a reference probe called outside its launch");
    return nullptr;
  }
  PyObject* result = PyObject_Vectorcall(p->target, args, nargsf, kwnames);
  if (result != nullptr) read_dims(result, p->out, p->known);
  return result;
}

void probe_dealloc(PyObject* self) { PyObject_Free(self); }

// One probe per thread, made at its first launch and kept (no allocation a launch).
thread_local Probe* t_probe = nullptr;
thread_local bool t_busy = false;  // a launch of this thread is in its wrapped call (a nested one passes)

struct Run {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* run;
};
PyTypeObject RunType = {PyVarObject_HEAD_INIT(nullptr, 0)};

void commit(const Record& r) {
  for (size_t i = 0; i < r.n; ++i) {
    g_ring[g_pos++] = r.w[i];
    if (g_pos == kRingWords) {
      g_pos = 0;
      g_wrapped = true;
    }
  }
  ++g_records;
}

PyObject* run_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  PyObject* run = reinterpret_cast<Run*>(self)->run;
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  Py_ssize_t nkw = kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0;
  if (t_busy || nargs < 1 || nargs + nkw > kMaxValues + 1) return PyObject_Vectorcall(run, args, nargsf, kwnames);
  if (t_probe == nullptr) {
    t_probe = PyObject_New(Probe, &ProbeType);
    if (t_probe == nullptr) return nullptr;
    t_probe->vectorcall = probe_call;
    t_probe->target = nullptr;
  }
  Record r;
  r.put(kMark);
  r.put(0);  // words, set below
  r.put(reinterpret_cast<uintptr_t>(args[0]));
  r.put(name_slot(kwnames));
  r.put(0);  // values, set below
  const size_t grid_at = r.n;
  r.put(1);
  r.put(1);
  r.put(1);
  r.put(0);  // grid dims known
  r.put(bits(now(CLOCK_REALTIME)));
  const size_t duration_at = r.n;
  r.put(0);
  PyObject* local[kMaxValues + 1];
  std::memcpy(local, args, sizeof(PyObject*) * static_cast<size_t>(nargs + nkw));
  uint64_t values = 0;
  for (Py_ssize_t i = 1; i < nargs; ++i, ++values) put_value(args[i], r);
  bool probed = false;
  for (Py_ssize_t j = 0; j < nkw; ++j) {
    PyObject* v = args[nargs + j];
    if (PyTuple_GET_ITEM(kwnames, j) != g_grid) {
      put_value(v, r);
      ++values;
      continue;
    }
    r.put(kOther);  // the grid's own place among the keyword values, so that slots match kwnames
    r.put(reinterpret_cast<uintptr_t>(v));
    ++values;
    if (PyTuple_CheckExact(v)) {
      read_dims(v, &r.w[grid_at], &r.w[grid_at + 3]);
    } else if (PyCallable_Check(v)) {
      t_probe->target = v;
      t_probe->out = &r.w[grid_at];
      t_probe->known = &r.w[grid_at + 3];
      local[nargs + j] = reinterpret_cast<PyObject*>(t_probe);
      probed = true;
    }
  }
  r.w[4] = values;
  double t0 = now(CLOCK_MONOTONIC);
  t_busy = true;
  PyObject* result = PyObject_Vectorcall(run, local, nargsf, kwnames);
  t_busy = false;
  if (probed) t_probe->target = nullptr;
  r.w[duration_at] = bits(now(CLOCK_MONOTONIC) - t0);
  if (!r.full) {
    r.w[1] = r.n;
    commit(r);
  }
  return result;
}

PyObject* run_get(PyObject* self, PyObject* obj, PyObject*) {
  if (obj == nullptr || obj == Py_None) return Py_NewRef(self);
  return PyMethod_New(self, obj);
}

void run_dealloc(PyObject* self) {
  Py_XDECREF(reinterpret_cast<Run*>(self)->run);
  PyObject_Free(self);
}

PyObject* wrap(PyObject*, PyObject* run) {
  Run* r = PyObject_New(Run, &RunType);
  if (r == nullptr) return nullptr;
  r->vectorcall = run_call;
  r->run = Py_NewRef(run);
  return reinterpret_cast<PyObject*>(r);
}

PyObject* reset(PyObject*, PyObject*) {
  g_pos = 0;
  g_records = 0;
  g_wrapped = false;
  Py_RETURN_NONE;
}

// (records written since `reset`, whether the ring was overwritten, the words from the ring's start to the
// next write as bytes, the kept kwnames tuples).
PyObject* state(PyObject*, PyObject*) {
  PyObject* names = PyTuple_New(g_nnames);
  if (names == nullptr) return nullptr;
  for (int i = 0; i < g_nnames; ++i) PyTuple_SET_ITEM(names, i, Py_NewRef(g_names[i]));
  return Py_BuildValue("(KOy#N)", static_cast<unsigned long long>(g_records), g_wrapped ? Py_True : Py_False,
                       reinterpret_cast<const char*>(g_ring), static_cast<Py_ssize_t>(g_pos * sizeof(uint64_t)),
                       names);
}

PyObject* count(PyObject*, PyObject*) { return PyLong_FromUnsignedLongLong(g_records); }

PyMethodDef kMethods[] = {
    {"wrap", wrap, METH_O, "wrap(run): an object to set as JITFunction.run that records each launch"},
    {"count", count, METH_NOARGS, "count(): records written since reset()"},
    {"reset", reset, METH_NOARGS, "reset(): forget the records"},
    {"state", state, METH_NOARGS, "state(): (records, wrapped, ring bytes, kwnames tuples)"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_tilelens_reference_capture", nullptr, -1, kMethods};

}  // namespace

PyMODINIT_FUNC PyInit__tilelens_reference_capture() {
  RunType.tp_name = "_tilelens_reference_capture.Run";
  RunType.tp_basicsize = sizeof(Run);
  RunType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR;
  RunType.tp_vectorcall_offset = offsetof(Run, vectorcall);
  RunType.tp_call = PyVectorcall_Call;
  RunType.tp_descr_get = run_get;
  RunType.tp_dealloc = run_dealloc;
  ProbeType.tp_name = "_tilelens_reference_capture.Probe";
  ProbeType.tp_basicsize = sizeof(Probe);
  ProbeType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
  ProbeType.tp_vectorcall_offset = offsetof(Probe, vectorcall);
  ProbeType.tp_call = PyVectorcall_Call;
  ProbeType.tp_dealloc = probe_dealloc;
  if (PyType_Ready(&RunType) < 0 || PyType_Ready(&ProbeType) < 0) return nullptr;
  if (g_ring == nullptr) g_ring = new uint64_t[kRingWords]();
  g_grid = PyUnicode_InternFromString("grid");
  PyObject* torch = PyImport_ImportModule("torch");
  if (torch == nullptr || g_grid == nullptr) return nullptr;
  g_tensor_type = PyObject_GetAttrString(torch, "Tensor");
  Py_DECREF(torch);
  if (g_tensor_type == nullptr) return nullptr;
  return PyModule_Create(&kModule);
}
