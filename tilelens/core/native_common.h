// What TileLens's compiled module's two sources share (native_capture.cpp, native_calls.cpp): an owned
// reference, a GC type's dealloc, a vectorcall helper, an optional attribute lookup, a name comparison and
// a thread-local's cached per-thread dict (`LocalDict`); the frame slots' order
// and offsets; and what each source calls of the other (`add_call_types`, `is_launcher`, `launch_vector`).
//
// Invariant: the GIL is held wherever these run.

#ifndef TILELENS_NATIVE_COMMON_H
#define TILELENS_NATIVE_COMMON_H

#include <Python.h>

#include <cstdint>
#include <initializer_list>

#if defined(TILELENS_PROFILE) && (defined(__x86_64__) || defined(__i386__))
#include <x86intrin.h>
#define TILELENS_PROFILED 1
#else
#define TILELENS_PROFILED 0
#endif

// A function the steady launch never runs once its kernel's templates are known (a fallback, a first time):
// out of line and placed with the other cold code, so that the steady path's own code fills fewer cache lines
// (the program's code, which runs between two launches, evicts it: each line it takes is a miss a launch).
#if defined(__GNUC__)
#define TL_COLD __attribute__((noinline, cold))
#else
#define TL_COLD
#endif

namespace tilelens_native {

// The parts of a steady compiled launch whose time-stamp-counter ticks a profiling build sums (built with
// -DTILELENS_PROFILE: `TILELENS_NATIVE_PROFILE=1`, read by `native.profile()`; issue 15). The H200's host is a
// VM without hardware counters, so this is how the launching thread's time inside TileLens is split there.
// `PART_NAMES` (native_capture.cpp) names them in this order. An ordinary build compiles the stamps to nothing.
enum Part : int {
  PART_INTERCEPT_LAUNCH,  // Intercept's call of a JITFunction.run until the launcher takes it
  PART_INTERCEPT_TUNE,    // the same for an Autotuner/Heuristics run until the tuner takes it
  PART_TUNE_BEFORE,       // the tuner: its plan and frame, until Triton's autotuner runs
  PART_TUNE_RUN,          // Triton's autotuner, the launch inside it included
  PART_TUNE_AFTER,        // the tuner after it: the frame off the stack
  PART_LAUNCH_BEFORE,     // the launcher: lookups, the probe, the clocks, until Triton's run
  PART_RUN,               // Triton's JITFunction.run (the program's grid function through the probe included)
  PART_AFTER_RUN,         // the clock, until the steady checks
  PART_CAPTURE,           // the bound arguments read and their signature compared (`capture_sig`)
  PART_METADATA,          // the compiled kernel's metadata found
  PART_NODE,              // the pytest node id read
  PART_KEPT,              // the launch's options and frames as words, its kernel's kept templates tested
  PART_LAST,              // its last template tested in place, when no kept one is the launch's
  PART_LOOKUP,            // the key made and compared or looked up when neither is, the template kept
  PART_GRID,              // the grid resolved
  PART_QUEUE,             // the launch queued for the writer (`queue_flat`)
  PART_ATTACH,            // its handle given to the innermost tuner frame, until the launcher returns
  PART_CALLER_BEFORE,     // an autotuner's launch framed from its Python frame: the frame read and pushed
  PART_CALLER_AFTER,      // the same after the launch: the frame popped, the cache's size compared
  NPARTS
};

#if TILELENS_PROFILED
inline uint64_t g_part_ticks[NPARTS];
inline uint64_t g_part_calls[NPARTS];
inline uint64_t ticks() { return __rdtsc(); }
inline void add_part(Part part, uint64_t since) {
  g_part_ticks[part] += __rdtsc() - since;
  ++g_part_calls[part];
}
#define TL_STAMP(name) const uint64_t name = tilelens_native::ticks()
#define TL_PART(part, since) tilelens_native::add_part(tilelens_native::part, since)
#else
#define TL_STAMP(name) static_cast<void>(0)
#define TL_PART(part, since) static_cast<void>(0)
#endif

// An owned reference, released at the end of its scope.
struct Ref {
  PyObject* p;
  explicit Ref(PyObject* o = nullptr) : p(o) {}
  ~Ref() { Py_XDECREF(p); }
  Ref(const Ref&) = delete;
  Ref& operator=(const Ref&) = delete;
  void reset(PyObject* o) { Py_XSETREF(p, o); }
  PyObject* get() const { return p; }
  PyObject* release() {
    PyObject* o = p;
    p = nullptr;
    return o;
  }
  explicit operator bool() const { return p != nullptr; }
};

// `tp_dealloc` of a garbage-collected type whose `tp_clear` drops every reference an instance holds.
inline void gc_dealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  Py_TYPE(self)->tp_clear(self);
  Py_TYPE(self)->tp_free(self);
}

inline PyObject* call_n(PyObject* fn, std::initializer_list<PyObject*> args) {
  return PyObject_Vectorcall(fn, const_cast<PyObject* const*>(args.begin()), args.size(), nullptr);
}

// `getattr(obj, name, None)` without making an AttributeError when it is missing: a new reference (None when
// missing), or nullptr and an exception for any other failure.
inline PyObject* attr_or_none(PyObject* obj, PyObject* name) {
  PyObject* value = nullptr;
#if PY_VERSION_HEX >= 0x030D0000
  int found = PyObject_GetOptionalAttr(obj, name, &value);
#else
  int found = _PyObject_LookupAttr(obj, name, &value);
#endif
  if (found < 0) return nullptr;
  return found ? value : Py_NewRef(Py_None);
}

// An exact int's value when CPython stores it in a single digit (magnitude below 2**30: the sizes, counts and
// grid dimensions a launch passes; "compact" ints from 3.12 on), into `out`: true. False for anything larger,
// with no exception; the caller then asks `PyLong_AsLongLongAndOverflow`. Reads the int's layout directly: ~4
// instructions where the call is ~25, paid for every scalar, grid dimension and number a launch packs.
inline bool compact_int(PyObject* v, int64_t& out) {
#if PY_VERSION_HEX >= 0x030C0000
  if (!PyUnstable_Long_IsCompact(reinterpret_cast<PyLongObject*>(v))) return false;
  out = static_cast<int64_t>(PyUnstable_Long_CompactValue(reinterpret_cast<PyLongObject*>(v)));
  return true;
#else
  Py_ssize_t size = Py_SIZE(v);
  if (size < -1 || size > 1) return false;
  out = static_cast<int64_t>(reinterpret_cast<PyLongObject*>(v)->ob_digit[0]) * size;
  return true;
#endif
}

// The slot of an object's address in a table of `1 << Bits` slots (Fibonacci hashing: the product's top bits
// depend on every bit of the address, where `(p >> 4) % n` put objects a multiple of `16 n` bytes apart, as
// objects of one size class often are, in one slot).
template <int Bits>
inline size_t address_slot(const void* p) {
  return static_cast<size_t>((static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)) * 0x9E3779B97F4A7C15ull) >>
                             (64 - Bits));
}

// Whether two argument names are the same string (two distinct interned strings never are).
inline bool is_name(PyObject* a, PyObject* b) {
  if (a == b) return true;
  if (!PyUnicode_Check(a) || !PyUnicode_Check(b)) return false;
  if (PyUnicode_CHECK_INTERNED(a) && PyUnicode_CHECK_INTERNED(b)) return false;
  return PyUnicode_Compare(a, b) == 0;
}

// How many times a thread-local attribute TileLens reads was set or deleted, on any thread
// (`locals_changed()`, called by `thread_state.NotifyingLocal` after each). A value `LocalDict` read stays
// what a read would give while this count and the asking thread stay the same.
inline uint64_t g_locals_changed = 1;

// A `threading.local`'s attributes as the calling thread sees them, read from that thread's own `__dict__`,
// which is kept between calls while the same thread asks: one dict lookup instead of `local_getattro`'s
// (~500 instructions, paid several times a launch). Thread ids are never reused (`PyThreadState_GetID`), so
// a kept dict is only ever read by its own thread. A name the thread never set is the class's default, read
// from the type's attribute cache when it is a plain value, else the usual way. The value read is kept, and
// given again while the thread and `g_locals_changed` stay the same (the class's defaults are not changed).
// Invariants: the names read so are plain attributes of the local, not descriptors of its class; one cache
// serves one local (its owner clears it when its local changes), and the owner's `tp_traverse` and
// `tp_clear` visit and clear it (`traverse`, `reset`) with its other references.
struct LocalDict {
  uint64_t thread;
  PyObject* dict;  // owned; nullptr: nothing kept
  // The last value read through the kept dict (owned; see `get` for which are kept), of `name` (an interned
  // name the caller keeps), read while `g_locals_changed` was `changes`: one owner reads one name, on every
  // launch.
  PyObject* name = nullptr;
  PyObject* value = nullptr;
  uint64_t changes = 0;

  void reset() {
    Py_CLEAR(dict);
    Py_CLEAR(value);
    name = nullptr;
    thread = 0;
  }
  int traverse(visitproc visit, void* arg) {
    Py_VISIT(dict);
    Py_VISIT(value);
    return 0;
  }

  // A new reference to `local.<name>` for this thread, or nullptr and an exception.
  PyObject* get(PyObject* local, PyObject* wanted) {
    static PyObject* dunder_dict = PyUnicode_InternFromString("__dict__");
    uint64_t id = PyThreadState_GetID(PyThreadState_Get());
    if (dict != nullptr && thread == id && value != nullptr && name == wanted && changes == g_locals_changed)
      return Py_NewRef(value);
    if (dict == nullptr || thread != id) {
      PyObject* d = dunder_dict != nullptr ? PyObject_GetAttr(local, dunder_dict) : nullptr;
      if (d == nullptr || !PyDict_CheckExact(d)) {
        Py_XDECREF(d);
        PyErr_Clear();
        return PyObject_GetAttr(local, wanted);
      }
      Py_XSETREF(dict, d);
      Py_CLEAR(value);
      thread = id;
    }
    PyObject* found = PyDict_GetItemWithError(dict, wanted);
    if (found == nullptr) {
      if (PyErr_Occurred()) return nullptr;
      // Not set by this thread: the class's default, when it is a plain value (the type's attribute cache).
      found = _PyType_Lookup(Py_TYPE(local), wanted);
      if (found == nullptr || Py_TYPE(found)->tp_descr_get != nullptr) return PyObject_GetAttr(local, wanted);
    }
    // Kept: None, an int, a list (what `launch` is outside an interpreted launch, `bench_depth`, `stack`); a
    // launch's context is not kept past a change, which would only drop it at the next read.
    if (found == Py_None || PyLong_CheckExact(found) || PyList_CheckExact(found)) {
      Py_XSETREF(value, Py_NewRef(found));
      name = wanted;
      changes = g_locals_changed;
    }
    return Py_NewRef(found);
  }
};

#if PY_VERSION_HEX >= 0x030C0000
// The running interpreter frame when its code is `code` (compared through CPython's own accessor), else
// nullptr (no exception, no frame object made).
inline struct _PyInterpreterFrame* running_interpreter_frame_of(PyObject* code) {
  PyThreadState* ts = PyThreadState_Get();
#if PY_VERSION_HEX >= 0x030D0000
  struct _PyInterpreterFrame* running = ts->current_frame;
#else
  struct _PyInterpreterFrame* running = ts->cframe != nullptr ? ts->cframe->current_frame : nullptr;
#endif
  if (running == nullptr) return nullptr;
  PyObject* now = PyUnstable_InterpreterFrame_GetCode(running);
  Py_XDECREF(now);  // the frame holds it
  return now == code ? running : nullptr;
}
#endif

// The Python frame running now on this thread when its code is `code` (borrowed, its frame object made if it
// had none), else nullptr (no exception). Python 3.12 on compare the code without making a frame object
// (`PyUnstable_InterpreterFrame_GetCode`), so a launch whose caller is some other code makes none; 3.11 makes
// the running frame's object first (`PyEval_GetFrame`).
inline PyFrameObject* running_frame_of(PyObject* code) {
#if PY_VERSION_HEX >= 0x030C0000
  return running_interpreter_frame_of(code) != nullptr ? PyEval_GetFrame() : nullptr;
#else
  PyFrameObject* frame = PyEval_GetFrame();
  if (frame == nullptr) return nullptr;
  PyCodeObject* now = PyFrame_GetCode(frame);
  Py_DECREF(now);
  return reinterpret_cast<PyObject*>(now) == code ? frame : nullptr;
#endif
}

// Reading a running frame's variables in place (Python 3.12 and 3.13, the default build): a launch framed from
// its autotuner's frame reads two variables there, and asking CPython for them (`PyFrame_GetVar`) first makes
// that frame's object (an allocation, tracked by the collector and freed when the call returns) and then
// finds each name among the code's. The running interpreter frame's variables lie in its `localsplus` array,
// one slot per local, cell and free variable in the order of the code's `co_localsplusnames` (a public field
// of `PyCodeObject` in these versions); a cell variable's slot holds its cell. `InterpreterFrameHead` is the
// head of CPython's internal `_PyInterpreterFrame` (Include/internal/pycore_frame.h), the same in 3.12 and
// 3.13: eight pointers, an int, a uint16 and a char before `localsplus`. Being internal, it is never trusted
// unchecked: native_calls.cpp compares its first reads with `PyFrame_GetVar`'s and stops reading in place
// when they differ. Elsewhere (`TL_FRAMES_IN_PLACE` 0) nothing is found in place and the frame's object is read.
#if PY_VERSION_HEX >= 0x030C0000 && PY_VERSION_HEX < 0x030E0000 && !defined(Py_GIL_DISABLED)
#define TL_FRAMES_IN_PLACE 1
#else
#define TL_FRAMES_IN_PLACE 0
#endif
struct InterpreterFrameHead {
  PyObject* code;
  void* previous;
  PyObject* funcobj;
  PyObject* globals;
  PyObject* builtins;
  PyObject* locals;
  PyObject* frame_obj;
  void* instr;
  int stacktop;
  uint16_t return_offset;
  char owner;
  PyObject* localsplus[1];
};

// Where the variable `name` of `code`'s frames lies among their `localsplus` slots (`at`; -1 when it is not
// one of the code's own locals or cells, or frames are not read in place here) and whether that slot holds
// its cell. The same for every frame of the code.
struct VarPlace {
  Py_ssize_t at = -1;
  bool cell = false;
};

inline VarPlace var_place(PyObject* code, PyObject* name) {
  VarPlace place;
#if TL_FRAMES_IN_PLACE
  if (code == nullptr || !PyCode_Check(code)) return place;
  PyCodeObject* co = reinterpret_cast<PyCodeObject*>(code);
  PyObject* names = co->co_localsplusnames;
  PyObject* kinds = co->co_localspluskinds;
  if (!PyTuple_Check(names) || !PyBytes_Check(kinds) || PyBytes_GET_SIZE(kinds) != PyTuple_GET_SIZE(names) ||
      PyTuple_GET_SIZE(names) != co->co_nlocalsplus)
    return place;
  constexpr unsigned char kCell = 0x40, kFree = 0x80;  // CO_FAST_CELL, CO_FAST_FREE (pycore_code.h)
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); ++i) {
    int equal = PyUnicode_Compare(PyTuple_GET_ITEM(names, i), name);
    if (equal == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return place;
    }
    if (equal != 0) continue;
    unsigned char kind = static_cast<unsigned char>(PyBytes_AS_STRING(kinds)[i]);
    if (kind & kFree) return place;  // a free variable's cell is the enclosing function's: not read here
    place.at = i;
    place.cell = (kind & kCell) != 0;
    return place;
  }
#else
  (void)code;
  (void)name;
#endif
  return place;
}

// The running interpreter frame's head when its code is `code`, else nullptr (no frame object made).
inline InterpreterFrameHead* running_head_of(PyObject* code) {
#if TL_FRAMES_IN_PLACE
  return reinterpret_cast<InterpreterFrameHead*>(running_interpreter_frame_of(code));
#else
  (void)code;
  return nullptr;
#endif
}

// The value of the variable at `place` in the running frame `head` (borrowed; nullptr when unbound, or when
// the slot does not hold what `place` says: a cell where a cell should be).
inline PyObject* var_in_place(InterpreterFrameHead* head, VarPlace place) {
  if (place.at < 0) return nullptr;
  PyObject* slot = head->localsplus[place.at];
  if (!place.cell) return slot;
  return slot != nullptr && PyCell_Check(slot) ? PyCell_GET(slot) : nullptr;
}

// The variable `name` of the Python frame `frame` as its code sees it now (a cell's content), as a new
// reference; nullptr without an exception when it is unbound, with one when reading failed. Python 3.12 on
// ask `PyFrame_GetVar`; 3.11 reads the frame's locals dict, brought up to date first. Not
// called before 3.11 (`compat.AUTOTUNER_RUN_CODE` is None there).
inline PyObject* frame_var(PyFrameObject* frame, PyObject* name) {
#if PY_VERSION_HEX >= 0x030C0000
  PyObject* value = PyFrame_GetVar(frame, name);
  if (value == nullptr && PyErr_ExceptionMatches(PyExc_NameError)) PyErr_Clear();
  return value;
#elif PY_VERSION_HEX >= 0x030B0000
  PyObject* locals = PyFrame_GetLocals(frame);
  if (locals == nullptr) return nullptr;
  PyObject* value = PyDict_Check(locals) ? PyDict_GetItemWithError(locals, name) : nullptr;
  Py_XINCREF(value);
  Py_DECREF(locals);
  return value;
#else
  (void)frame;
  (void)name;
  return nullptr;
#endif
}

// `compiled_frames.Frame`'s eleven slots, in this order (native_calls.cpp makes frames, the launcher reads them).
constexpr int NFRAME = 11;
enum FrameField : int {
  FRAME_LAYER, FRAME_KEY, FRAME_HEURISTICS, FRAME_TRIALS, FRAME_LAUNCH, FRAME_TUNER, FRAME_KEY_TEXT, FRAME_TUNED,
  FRAME_ARGS, FRAME_KEY_VALUES, FRAME_POSITIONS
};

// A tuned frame's key values as `compiled_frames.key_values` makes them from its `args` and `positions`:
// (len(args), tuple(args[i] for i in positions)); nullptr and an exception on failure (native_calls.cpp).
PyObject* key_values_of(PyObject* args, PyObject* positions);

// The offsets of the frame class's slots; false (and a TypeError) unless each is a plain object slot of a
// class without `__dict__` (native_calls.cpp).
bool frame_offsets(PyObject* type_object, Py_ssize_t* offsets);

// The same for any class and `n` slot names (`what` names the class in the error).
bool slot_offsets(PyObject* type_object, const char* const* names, int n, Py_ssize_t* offsets, const char* what);

// A frame's slot (borrowed; nullptr when unset), the frame being of the class the offsets were read from.
inline PyObject*& frame_slot(PyObject* frame, const Py_ssize_t* offsets, int field) {
  return *reinterpret_cast<PyObject**>(reinterpret_cast<char*>(frame) + offsets[field]);
}

// Adds the types of native_calls.cpp (`Intercept`, `Tuner`) to the module; -1 and an exception on failure.
int add_call_types(PyObject* module);

// The frame of a launch an autotuner's own `run` makes, framed from that call's Python frame when the call
// cannot have tuned (native_calls.cpp, `framed_from`), handed to the launcher by `launch_vector`
// instead of a `Frame` on the thread's stack. A steady launch reads it in place (`frames_words`: the frame's
// words are those of `Frame(tuner, key, (), 0, False, True, tuned=key is not None)`); before anything else reads
// the stack (a slower test, Python's paths), the launcher has it made into that `Frame` and appended to the
// stack (`push`), and the framing call takes it off after. Only the launch it was handed to sees it: a launch
// nested in that one (a hook's, a finalizer's) does not.
struct CallerFrame {
  PyObject* tuner;  // borrowed: the autotuner's running frame holds it
  PyObject* key;    // borrowed; nullptr when unbound (an autotuner of one config)
  PyObject* stack;  // the thread's frame stack, a list (borrowed: the framing call holds it)
  int (*push)(CallerFrame*);  // makes `frame` and appends it to `stack`: 0, or -1 and an exception
  PyObject* frame = nullptr;  // once pushed (owned by the framing call)
};

// Whether `caller` (if any) is on the thread's stack as a `Frame`, pushing it now if not: false and an
// exception when that failed.
inline bool caller_pushed(CallerFrame* caller) {
  return caller == nullptr || caller->frame != nullptr || caller->push(caller) == 0;
}

// native_capture.cpp's `Launcher`: whether `o` is one, and its launch from the vectorcall arguments an
// `Intercept` received (`args[0]` the kernel, then the positional arguments, then the values named by
// `kwnames`): what calling it with (kernel, tuple, dict) does, without making the tuple and the dict when the
// launch is steady. `caller`: the launch's frame not yet on the stack (`CallerFrame`), or nullptr.
bool is_launcher(PyObject* o);
PyObject* launch_vector(PyObject* launcher, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames,
                        CallerFrame* caller = nullptr);

}  // namespace tilelens_native

#endif
