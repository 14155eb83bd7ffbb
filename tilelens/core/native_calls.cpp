// The calls around a compiled recording's launch, in C++ (issue 15): interception of Triton's `run` methods
// (`Intercept`) and the autotuner's frame (`Tuner`), the latter also read from the autotuner's own Python
// frame for the launch it makes (`caller_framed_launch`: no Python counterpart; its rows are compared with
// the intercepted path's and the Python router's). Part of TileLens's compiled module (built with
// native_capture.cpp by tilelens/core/native.py); what they do is the Python they stand for, described below.
//
// Invariant: each does exactly what its Python counterpart does (`interpreter.interception_patches`'
// `run_direct`; `CompiledRouter.tune`), calling the same Python callables with the same arguments, and
// passes on every exception unchanged; whatever it does not handle itself goes to that Python. The GIL is
// held throughout.

#include <Python.h>

#include <structmember.h>

#include <cstring>

#include "native_common.h"

namespace tilelens_native {
namespace {

struct CallNames {
  PyObject *trace, *launch, *warmup, *configs, *cache, *stack, *configs_timings, *grid, *self, *key, *pruned_configs;
} g_call_names;

// ---------------------------------------------------------------------------------------------------------
// Intercept: `run_direct` of `interception_patches`, a descriptor set as `JITFunction.run`, `Autotuner.run`
// or `Heuristics.run` for a compiled recording. `obj.run(*args, **kwargs)` calls `original` unchanged when
// `obj` is a layer TileLens traces (`_tilelens_trace`), when an interpreted launch runs on this thread
// (`thread.launch`) or for a warmup; else `target(obj, args, kwargs)` with a fresh tuple and dict. As a
// method descriptor it is called without a bound method being made; `__wrapped__` is `original`.

struct Intercept {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* original;
  PyObject* target;
  PyObject* thread;
  // A `Tuner` configured with Triton's `Autotuner.run` code (`caller_framed_launch`), or nullptr: the
  // launches an autotuner makes get their frame here, from its Python frame, when its `run` is Triton's own.
  PyObject* caller;
  LocalDict thread_dict;  // `thread`'s dict for the thread last asking
  // Layers found without a mark since `marks_seen` marks were added (owned, so that no other object takes
  // one's address meanwhile), by address: `getattr(obj, "_tilelens_trace", None)`, a miss through the
  // class's MRO and the instance's dict (~190 instructions), is paid once per layer, not per launch.
  static constexpr int kUnmarkedBits = 3;
  PyObject* unmarked[1 << kUnmarkedBits];
  uint64_t marks_seen;
};

// How many marks TileLens has added (`marks_added()`). Only `interpreter.rewire_chain` adds one, and it calls
// `marks_added()` after each: an object found unmarked stays unmarked while this count does not change (a
// restore only puts a mark back on an object that had it all along, or removes one).
uint64_t g_marks = 0;

PyObject* marks_added(PyObject*, PyObject*) {
  ++g_marks;
  Py_RETURN_NONE;
}

PyObject* locals_changed(PyObject*, PyObject*) {
  ++g_locals_changed;
  Py_RETURN_NONE;
}

void forget_unmarked(Intercept* ic) {
  for (PyObject*& p : ic->unmarked) Py_CLEAR(p);
}

PyTypeObject InterceptType = {PyVarObject_HEAD_INIT(nullptr, 0)};
extern PyTypeObject TunerType;
PyObject* tune_vector(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames);
PyObject* caller_framed_launch(PyObject* tuner, PyObject* launcher, PyObject* const* args, Py_ssize_t nargs,
                               PyObject* kwnames);

int intercept_traverse(PyObject* self, visitproc visit, void* arg) {
  Intercept* i = reinterpret_cast<Intercept*>(self);
  Py_VISIT(i->original);
  Py_VISIT(i->target);
  Py_VISIT(i->thread);
  Py_VISIT(i->caller);
  if (int r = i->thread_dict.traverse(visit, arg)) return r;
  for (PyObject* p : i->unmarked) Py_VISIT(p);
  return 0;
}

int intercept_clear(PyObject* self) {
  Intercept* i = reinterpret_cast<Intercept*>(self);
  Py_CLEAR(i->original);
  Py_CLEAR(i->target);
  Py_CLEAR(i->thread);
  Py_CLEAR(i->caller);
  i->thread_dict.reset();
  forget_unmarked(i);
  return 0;
}

// 1: Triton's own `run` takes the call; 0: the target does; -1: an exception.
int passes_through(Intercept* ic, PyObject* obj, PyObject* const* kwvalues, PyObject* kwnames) {
  PyObject*& known = ic->unmarked[address_slot<Intercept::kUnmarkedBits>(obj)];
  if (known != obj || ic->marks_seen != g_marks) {
    Ref trace(attr_or_none(obj, g_call_names.trace));
    if (!trace) return -1;
    if (trace.get() != Py_None) return 1;
    if (ic->marks_seen != g_marks) {
      forget_unmarked(ic);
      ic->marks_seen = g_marks;
    }
    Py_XSETREF(known, Py_NewRef(obj));
  }
  Ref launch(ic->thread_dict.get(ic->thread, g_call_names.launch));
  if (!launch) return -1;
  if (launch.get() != Py_None) return 1;
  Py_ssize_t nk = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t i = 0; i < nk; ++i) {
    if (is_name(PyTuple_GET_ITEM(kwnames, i), g_call_names.warmup)) {
      int warm = PyObject_IsTrue(kwvalues[i]);
      if (warm != 0) return warm;
    }
  }
  return 0;
}

// `target(obj, args, kwargs)` for a Python target: the call's arguments as a tuple and a dict. Cold: the
// compiled targets (a `Launcher`, a `Tuner`) take the call as it arrived.
TL_COLD PyObject* call_target(PyObject* target, PyObject* const* args, Py_ssize_t n, PyObject* kwnames) {
  Ref positional(PyTuple_New(n - 1));
  Ref keywords(PyDict_New());
  if (!positional || !keywords) return nullptr;
  for (Py_ssize_t i = 1; i < n; ++i) PyTuple_SET_ITEM(positional.get(), i - 1, Py_NewRef(args[i]));
  Py_ssize_t nk = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t i = 0; i < nk; ++i) {
    if (PyDict_SetItem(keywords.get(), PyTuple_GET_ITEM(kwnames, i), args[n + i]) < 0) return nullptr;
  }
  return call_n(target, {args[0], positional.get(), keywords.get()});
}

PyObject* intercept_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  TL_STAMP(entered);
  Intercept* ic = reinterpret_cast<Intercept*>(self);
  Py_ssize_t n = PyVectorcall_NARGS(nargsf);
  if (ic->original == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "a cleared interception");
    return nullptr;
  }
  if (n < 1) return PyObject_Vectorcall(ic->original, args, nargsf, kwnames);
  int pass = passes_through(ic, args[0], args + n, kwnames);
  if (pass < 0) return nullptr;
  if (pass) return PyObject_Vectorcall(ic->original, args, nargsf, kwnames);
  // The compiled targets take the call as it arrived (what calling them with a tuple and a dict does).
  if (is_launcher(ic->target)) {
    TL_PART(PART_INTERCEPT_LAUNCH, entered);
    if (ic->caller != nullptr) return caller_framed_launch(ic->caller, ic->target, args, n, kwnames);
    return launch_vector(ic->target, args, n, kwnames);
  }
  if (Py_IS_TYPE(ic->target, &TunerType)) {
    TL_PART(PART_INTERCEPT_TUNE, entered);
    return tune_vector(ic->target, args, n, kwnames);
  }
  return call_target(ic->target, args, n, kwnames);
}

PyObject* intercept_get(PyObject* self, PyObject* obj, PyObject*) {
  if (obj == nullptr || obj == Py_None) return Py_NewRef(self);
  return PyMethod_New(self, obj);
}

PyObject* intercept_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject *original, *target, *thread, *caller = Py_None;
  if (kwargs != nullptr && PyDict_GET_SIZE(kwargs)) {
    PyErr_SetString(PyExc_TypeError, "Intercept(original, target, thread, caller=None) takes no keyword arguments");
    return nullptr;
  }
  if (!PyArg_ParseTuple(args, "OOO|O:Intercept", &original, &target, &thread, &caller)) return nullptr;
  if (caller != Py_None && !Py_IS_TYPE(caller, &TunerType)) {
    PyErr_SetString(PyExc_TypeError, "an interception's caller must be a Tuner or None");
    return nullptr;
  }
  Intercept* ic = PyObject_GC_New(Intercept, type);
  if (ic == nullptr) return nullptr;
  ic->vectorcall = intercept_vectorcall;
  ic->original = Py_NewRef(original);
  ic->target = Py_NewRef(target);
  ic->thread = Py_NewRef(thread);
  ic->caller = caller == Py_None ? nullptr : Py_NewRef(caller);
  ic->thread_dict = LocalDict{0, nullptr};
  for (PyObject*& p : ic->unmarked) p = nullptr;
  ic->marks_seen = g_marks;
  PyObject_GC_Track(ic);
  return reinterpret_cast<PyObject*>(ic);
}

PyMemberDef intercept_members[] = {
    {"__wrapped__", T_OBJECT, offsetof(Intercept, original), READONLY, "Triton's own run"},
    {"target", T_OBJECT, offsetof(Intercept, target), READONLY, "what intercepted calls go to"},
    {"caller", T_OBJECT, offsetof(Intercept, caller), READONLY, "the Tuner framing launches from their caller"},
    {nullptr, 0, 0, 0, nullptr}};

// ---------------------------------------------------------------------------------------------------------
// Tuner: `CompiledRouter.tune` for a call of an autotuner of one config, or of one the router knows (its
// plan is in `plans`) made with positional arguments that reach every key position and keyword arguments
// (if any) among `reserved` (`grid`, `warmup`) when no parameter has such a name. It makes the call's `Frame` (`Frame(tuner, None, (),
// 0, None, True)`, with `tuned`, `args` and `positions` set as `_key_later` sets them), keeps it on this
// thread's stack while Triton's `Autotuner.run` runs, and when the call added a key to the tuner's cache
// calls `tuned(tuner, frame, timings_before, cache)` (the router's `_tuned`), also when the run raised.
// Every other call, and every call while not configured, goes to `slow(tuner, args, kwargs)`.
//
// The frame is made without running the dataclass's `__init__`: its ten slots are set directly, at the
// offsets `configure` read from the class's member descriptors.

const char* kFrameFields[NFRAME] = {"layer",    "key",   "heuristics", "trials", "launch",
                                    "tuner",    "key_text", "tuned",   "args",   "key_values", "positions"};

enum TunerField : int { PLANS, LOCAL, RUN, TUNED_AFTER, FRAME_TYPE, RESERVED, CALLER_CODE, CALLER_AFTER, STACK, NTUNER };
constexpr int NTUNER_FRAMED = CALLER_CODE;  // `configure` without the last three: callers are not read

struct Tuner {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* slow;
  PyObject* config;  // a tuple of NTUNER, or nullptr: not configured
  Py_ssize_t offsets[NFRAME];
  Py_ssize_t steady;
  Py_ssize_t fallbacks;
  LocalDict local_dict;  // the configured LOCAL's dict for the thread last asking
  bool grid_warmup;  // the configured RESERVED holds "grid" and "warmup"
  // Plans found in PLANS lately, by their tuner's address (owned). A plan holds its tuner (item 0), so a plan
  // whose tuner is this call's is this tuner's: the router replaces a plan only for a new tuner at a freed
  // one's address. Cleared with the configuration.
  static constexpr int kSeenBits = 4;
  static constexpr int kSeen = 1 << kSeenBits;
  PyObject* seen[kSeen];
  // Autotuners whose launches were framed from their `run`'s Python frame lately, by address (owned: no other
  // object takes a tuner's address meanwhile): the size of its cache at the last such launch. Cleared with the
  // configuration.
  struct CallerSeen {
    PyObject* tuner;
    Py_ssize_t cache_size;
  };
  static constexpr int kCallerBits = 4;
  CallerSeen callers[1 << kCallerBits];
  Py_ssize_t caller_framed;
  // Where `Autotuner.run`'s `self`, `key` and `pruned_configs` lie in its running frames (`var_place`), and
  // whether they are read there: 1 yes (the first such read matched `PyFrame_GetVar`'s), 0 not yet checked,
  // -1 no (through the frame's object). Set by each configuration.
  VarPlace self_place, key_place, pruned_place;
  int in_place;
  Py_ssize_t caller_in_place;  // launches whose autotuner's variables were read in place
  Py_ssize_t caller_made;  // launches of calls that did not tune whose frame the launcher had made (`PendingCaller`)
  // A frame of the last call, its slots emptied, when no one else held it as the call ended (`FrameLease`),
  // or nullptr. Owned; cleared with the configuration.
  PyObject* spare_frame;
};

PyTypeObject TunerType = {PyVarObject_HEAD_INIT(nullptr, 0)};

int tuner_traverse(PyObject* self, visitproc visit, void* arg) {
  Tuner* t = reinterpret_cast<Tuner*>(self);
  Py_VISIT(t->slow);
  Py_VISIT(t->config);
  if (int r = t->local_dict.traverse(visit, arg)) return r;
  for (PyObject* p : t->seen) Py_VISIT(p);
  for (const Tuner::CallerSeen& c : t->callers) Py_VISIT(c.tuner);
  Py_VISIT(t->spare_frame);
  return 0;
}

int tuner_clear(PyObject* self) {
  Tuner* t = reinterpret_cast<Tuner*>(self);
  Py_CLEAR(t->slow);
  Py_CLEAR(t->config);
  t->local_dict.reset();
  for (PyObject*& p : t->seen) Py_CLEAR(p);
  for (Tuner::CallerSeen& c : t->callers) Py_CLEAR(c.tuner);
  Py_CLEAR(t->spare_frame);
  return 0;
}

// A frame with its ten slots set (`values` borrowed; nullptr and an exception on failure).
PyObject* new_frame(PyTypeObject* type, const Py_ssize_t* offsets, PyObject* const* values) {
  PyObject* frame = type->tp_alloc(type, 0);
  if (frame == nullptr) return nullptr;
  for (int i = 0; i < NFRAME; ++i) Py_XSETREF(frame_slot(frame, offsets, i), Py_NewRef(values[i]));
  return frame;
}

// A call's frame: the tuner's spare one when it is of `type` and no one else holds it, its empty slots set
// from `values`, else a new one (`new_frame`). At the end of the call, a frame no one else holds (no
// template, event or Python frame kept it) has its slots emptied, dropping what they held as a frame's
// deallocation would, and becomes the spare: a tuned call then allocates, tracks and frees no frame.
struct FrameLease {
  Tuner* t;
  const Py_ssize_t* offsets;
  Ref frame;

  FrameLease(Tuner* tuner, PyTypeObject* type, const Py_ssize_t* slot_offsets, PyObject* const* values)
      : t(tuner), offsets(slot_offsets) {
    PyObject* spare = t->spare_frame;
    if (spare != nullptr && Py_TYPE(spare) == type && Py_REFCNT(spare) == 1) {
      t->spare_frame = nullptr;
      frame.reset(spare);
      for (int i = 0; i < NFRAME; ++i) Py_XSETREF(frame_slot(spare, offsets, i), Py_NewRef(values[i]));
    } else {
      frame.reset(new_frame(type, offsets, values));
    }
  }
  ~FrameLease() {
    PyObject* f = frame.get();
    if (f == nullptr || Py_REFCNT(f) != 1 || t->spare_frame != nullptr || PyErr_Occurred()) return;
    for (int i = 0; i < NFRAME; ++i) Py_CLEAR(frame_slot(f, offsets, i));  // may run a finalizer, which may tune
    if (t->spare_frame == nullptr && Py_REFCNT(f) == 1) t->spare_frame = frame.release();
  }
  FrameLease(const FrameLease&) = delete;
  FrameLease& operator=(const FrameLease&) = delete;
};

}  // namespace

PyObject* key_values_of(PyObject* args, PyObject* positions) {
  if (!PyTuple_CheckExact(args) || !PyTuple_CheckExact(positions)) {
    PyErr_SetString(PyExc_TypeError, "a frame's args and positions must be tuples");
    return nullptr;
  }
  Py_ssize_t m = PyTuple_GET_SIZE(positions);
  Ref values(PyTuple_New(m));
  if (!values) return nullptr;
  for (Py_ssize_t i = 0; i < m; ++i) {
    Py_ssize_t at = PyLong_AsSsize_t(PyTuple_GET_ITEM(positions, i));
    if (at < 0 || at >= PyTuple_GET_SIZE(args)) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "a key position outside the arguments");
      return nullptr;
    }
    PyTuple_SET_ITEM(values.get(), i, Py_NewRef(PyTuple_GET_ITEM(args, at)));
  }
  Ref count(PyLong_FromSsize_t(PyTuple_GET_SIZE(args)));
  if (!count) return nullptr;
  return PyTuple_Pack(2, count.get(), values.get());
}

namespace {

// An autotuner call's arguments: the positional ones as a tuple, and the keyword ones as a dict or, from an
// `Intercept`, as the vectorcall's values named by `kwnames` (the dict made only when Python needs it).
struct TuneArgs {
  Ref args, kwargs;
  PyObject* const* kwvalues = nullptr;
  PyObject* kwnames = nullptr;

  Py_ssize_t nkw() const {
    return kwargs ? PyDict_GET_SIZE(kwargs.get()) : kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  }
  PyObject* dict() {
    if (!kwargs) {
      kwargs.reset(PyDict_New());
      Py_ssize_t n = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
      for (Py_ssize_t i = 0; kwargs && i < n; ++i) {
        if (PyDict_SetItem(kwargs.get(), PyTuple_GET_ITEM(kwnames, i), kwvalues[i]) < 0) kwargs.reset(nullptr);
      }
      kwvalues = nullptr;
      kwnames = nullptr;
    }
    return kwargs.get();
  }
  // 1 when every keyword name is in `names` (a set), 0 when one is not, -1 on an error.
  // `grid_warmup`: `names` holds "grid" and "warmup" (then those two interned names are in it without a lookup).
  int names_within(PyObject* names, bool grid_warmup) const {
    if (kwargs) {
      Py_ssize_t pos = 0;
      PyObject *name, *value;
      while (PyDict_Next(kwargs.get(), &pos, &name, &value)) {
        int in = PySet_Contains(names, name);
        if (in <= 0) return in;
      }
      return 1;
    }
    for (Py_ssize_t i = 0; i < nkw(); ++i) {
      PyObject* name = PyTuple_GET_ITEM(kwnames, i);
      if (grid_warmup && (name == g_call_names.grid || name == g_call_names.warmup)) continue;
      int in = PySet_Contains(names, name);
      if (in <= 0) return in;
    }
    return 1;
  }
};

// `run(tuner, *args, **kwargs)`. Allocates nothing outside Python's allocator (it runs with the call's frame on
// the stack: a C++ exception here would leave it there).
PyObject* call_run(PyObject* run, PyObject* tuner, TuneArgs& a) {
  PyObject* args = a.args.get();
  Py_ssize_t n = PyTuple_GET_SIZE(args);
  constexpr Py_ssize_t kStack = 64;
  if (!a.kwargs && 1 + n + a.nkw() <= kStack) {  // the vectorcall form, or no keyword arguments
    Py_ssize_t nk = a.nkw();
    PyObject* stack[kStack];
    stack[0] = tuner;
    for (Py_ssize_t i = 0; i < n; ++i) stack[i + 1] = PyTuple_GET_ITEM(args, i);
    for (Py_ssize_t i = 0; i < nk; ++i) stack[1 + n + i] = a.kwvalues[i];
    return PyObject_Vectorcall(run, stack, static_cast<size_t>(n + 1), nk ? a.kwnames : nullptr);
  }
  if (a.dict() == nullptr) return nullptr;
  Ref all(PyTuple_New(n + 1));
  if (!all) return nullptr;
  PyTuple_SET_ITEM(all.get(), 0, Py_NewRef(tuner));
  for (Py_ssize_t i = 0; i < n; ++i) PyTuple_SET_ITEM(all.get(), i + 1, Py_NewRef(PyTuple_GET_ITEM(args, i)));
  return PyObject_Call(run, all.get(), a.kwargs.get());
}

// What `plan_call` found out about a call.
struct Plan {
  bool tuned = false;
  Ref positions, timings_before, cache, stack;
};

// 1: this call is the Tuner's (`out` set); 0: Python's; -1: an exception (the caller clears it: Python's).
int plan_call(PyObject* config, Tuner* t, PyObject* tuner, TuneArgs& a, Plan& out) {
  PyObject* args = a.args.get();
  Ref configs(PyObject_GetAttr(tuner, g_call_names.configs));
  if (!configs) return -1;
  Py_ssize_t n = PyObject_Size(configs.get());
  if (n < 0) return -1;
  out.tuned = n > 1;
  if (out.tuned) {  // a key: from the plan the router made at this tuner's first tuned call
    PyObject*& seen = t->seen[address_slot<Tuner::kSeenBits>(tuner)];
    Ref plan_ref;
    if (seen != nullptr && PyTuple_GET_ITEM(seen, 0) == tuner) {
      plan_ref.reset(Py_NewRef(seen));
    } else {
      Ref id(PyLong_FromVoidPtr(tuner));
      if (!id) return -1;
      PyObject* found = PyDict_GetItemWithError(PyTuple_GET_ITEM(config, PLANS), id.get());
      if (found == nullptr || !PyTuple_CheckExact(found) || PyTuple_GET_SIZE(found) < 4 ||
          PyTuple_GET_ITEM(found, 0) != tuner)
        return PyErr_Occurred() ? -1 : 0;
      plan_ref.reset(Py_NewRef(found));
      Py_XSETREF(seen, Py_NewRef(found));
    }
    PyObject* plan = plan_ref.get();
    PyObject* positions = PyTuple_GET_ITEM(plan, 1);
    if (!PyTuple_CheckExact(positions)) return 0;
    if (a.nkw()) {
      int free = PyObject_IsTrue(PyTuple_GET_ITEM(plan, 2));
      if (free <= 0) return free;
      int within = a.names_within(PyTuple_GET_ITEM(config, RESERVED), t->grid_warmup);
      if (within <= 0) return within;
    }
    Py_ssize_t highest = PyLong_AsSsize_t(PyTuple_GET_ITEM(plan, 3));
    if (highest == -1 && PyErr_Occurred()) return -1;
    if (PyTuple_GET_SIZE(args) <= highest) return 0;
    out.positions.reset(Py_NewRef(positions));  // the key values are made only when needed (`key_values_of`)
    out.timings_before.reset(attr_or_none(tuner, g_call_names.configs_timings));
    if (!out.timings_before) return -1;
  }
  out.cache.reset(PyObject_GetAttr(tuner, g_call_names.cache));
  if (!out.cache) return -1;
  if (!PyDict_Check(out.cache.get())) return 0;
  out.stack.reset(t->local_dict.get(PyTuple_GET_ITEM(config, LOCAL), g_call_names.stack));
  if (!out.stack) return -1;
  return PyList_CheckExact(out.stack.get()) ? 1 : 0;
}

// `slow(tuner, args, kwargs)`.
TL_COLD PyObject* call_slow(PyObject* slow, PyObject* tuner, TuneArgs& a) {
  PyObject* kwargs = a.dict();
  return kwargs ? call_n(slow, {tuner, a.args.get(), kwargs}) : nullptr;
}

// The `finally` block's own exception (set) replaces the run's (`type`, `value`, `tb`, owned: taken here),
// chained to it as Python does; nullptr. Cold.
TL_COLD PyObject* finally_failed(PyObject* type, PyObject* value, PyObject* tb) {
  if (value != nullptr) {
    PyObject *t2, *v2, *tb2;
    PyErr_Fetch(&t2, &v2, &tb2);
    PyErr_NormalizeException(&t2, &v2, &tb2);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != nullptr) PyException_SetTraceback(value, tb);
    if (v2 != nullptr) PyException_SetContext(v2, Py_NewRef(value));
    PyErr_Restore(t2, v2, tb2);
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return nullptr;
}

// The last frame off `stack` (0, or -1 and an exception).
int pop_frame(PyObject* stack) {
  Py_ssize_t depth = PyList_GET_SIZE(stack);
  return depth > 0 ? PyList_SetSlice(stack, depth - 1, depth, nullptr) : 0;
}

// The end of a call's `finally` (the run's exception `type`, `value`, `tb` fetched, owned): when the block
// failed (`popped` -1, its exception set), that one chained to the run's; else the run's exception, or its
// `result`.
PyObject* end_finally(int popped, Ref& result, PyObject* type, PyObject* value, PyObject* tb) {
  if (popped < 0) return finally_failed(type, value, tb);
  if (type != nullptr) {
    PyErr_Restore(type, value, tb);
    return nullptr;
  }
  return result.release();
}

PyObject* tune(Tuner* t, PyObject* tuner, TuneArgs& a) {
  if (t->slow == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "a cleared tuner");
    return nullptr;
  }
  PyObject* args = a.args.get();
  if (t->config == nullptr || !PyTuple_CheckExact(args) || (a.kwargs && !PyDict_CheckExact(a.kwargs.get())))
    return call_slow(t->slow, tuner, a);
  TL_STAMP(entered);
  Ref config(Py_NewRef(t->config));
  Py_ssize_t offsets[NFRAME];
  std::memcpy(offsets, t->offsets, sizeof(offsets));
  Plan plan;
  int mine = plan_call(config.get(), t, tuner, a, plan);
  if (mine <= 0) {
    PyErr_Clear();
    ++t->fallbacks;
    return call_slow(t->slow, tuner, a);
  }
  Ref empty(PyTuple_New(0));
  Ref zero(PyLong_FromLong(0));
  if (!empty || !zero) return nullptr;
  PyObject* tuned = plan.tuned ? Py_True : Py_False;
  PyObject* values[NFRAME] = {tuner,   Py_None, empty.get(), zero.get(), Py_None,
                              Py_True, Py_None, tuned,       plan.tuned ? args : Py_None,
                              Py_None, plan.tuned ? plan.positions.get() : Py_None};
  PyTypeObject* frame_type = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(config.get(), FRAME_TYPE));
  FrameLease lease(t, frame_type, offsets, values);
  Ref& frame = lease.frame;
  if (!frame) return nullptr;
  PyObject* cache = plan.cache.get();
  Py_ssize_t size = PyDict_GET_SIZE(cache);
  PyObject* stack = plan.stack.get();
  if (PyList_Append(stack, frame.get()) < 0) return nullptr;
  ++t->steady;
  TL_PART(PART_TUNE_BEFORE, entered);
  TL_STAMP(running);
  Ref result(call_run(PyTuple_GET_ITEM(config.get(), RUN), tuner, a));
  TL_PART(PART_TUNE_RUN, running);
  TL_STAMP(ran);
  // `finally`: off the stack, then a fresh tuning's event, also when the run raised.
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  int popped = pop_frame(stack);
  if (popped == 0 && plan.tuned && PyDict_GET_SIZE(cache) != size) {
    Ref done(call_n(PyTuple_GET_ITEM(config.get(), TUNED_AFTER),
                    {tuner, frame.get(), plan.timings_before.get(), cache}));
    popped = done ? 0 : -1;
  }
  TL_PART(PART_TUNE_AFTER, ran);
  return end_finally(popped, result, type, value, tb);
}

PyObject* tuner_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  if (PyVectorcall_NARGS(nargsf) != 3 || (kwnames != nullptr && PyTuple_GET_SIZE(kwnames))) {
    PyErr_SetString(PyExc_TypeError, "a tuner takes (tuner, args, kwargs)");
    return nullptr;
  }
  if (!PyTuple_Check(args[1]) || !PyDict_Check(args[2])) {
    PyErr_SetString(PyExc_TypeError, "a tuner takes (tuner, args tuple, kwargs dict)");
    return nullptr;
  }
  TuneArgs a;
  a.args.reset(Py_NewRef(args[1]));
  a.kwargs.reset(Py_NewRef(args[2]));
  try {
    return tune(reinterpret_cast<Tuner*>(self), args[0], a);
  } catch (...) {  // nothing here throws; a C++ exception must not cross into Python
    PyErr_SetString(PyExc_RuntimeError, "TileLens's compiled tuner failed");
    return nullptr;
  }
}

// `Intercept`'s call of a tuner: `tuner.run(*args, **kwargs)` as it arrived (`args[0]` the autotuner).
PyObject* tune_vector(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  TuneArgs a;
  a.args.reset(PyTuple_New(nargs - 1));
  if (!a.args) return nullptr;
  for (Py_ssize_t i = 1; i < nargs; ++i) PyTuple_SET_ITEM(a.args.get(), i - 1, Py_NewRef(args[i]));
  a.kwvalues = args + nargs;
  a.kwnames = kwnames != nullptr && PyTuple_GET_SIZE(kwnames) ? kwnames : nullptr;
  try {
    return tune(reinterpret_cast<Tuner*>(self), args[0], a);
  } catch (...) {  // nothing here throws; a C++ exception must not cross into Python
    PyErr_SetString(PyExc_RuntimeError, "TileLens's compiled tuner failed");
    return nullptr;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Launches from a caller's frame: with Triton's `Autotuner.run` left as it is, the launch its `self.fn.run`
// makes reaches the `Intercept` of `JITFunction.run` with that `run`'s Python frame as the running one. The
// launch then gets the frame the tuner would have made (`Frame(tuner, key, (), 0, None, True)`, `tuned` when
// the autotuner has more than one config), its values read from that Python frame (`self`, and `key`, the
// tuning key Triton just made), on this thread's stack while the launcher runs. When the call may have tuned
// (read in place: `pruned_configs` is bound in that frame; else: the autotuner's cache changed size since its
// last launch framed here, or it is new here), `caller_after(tuner, frame, python_frame)` (the router's
// `_after_caller_tuner`) then tells whether it did, also when the launch raised; any other call's frame has
// `launch` False, so that no launch handle is made for it. Every other launch goes to the launcher as it is.
// What this saves against intercepting the autotuner: a C call into Python per autotuned call, with its
// frame, plan lookups and tuple of arguments.

// The Tuner's remembered cache size of `tuner` (-1 when it is new here).
Tuner::CallerSeen& caller_seen(Tuner* t, PyObject* tuner) {
  Tuner::CallerSeen& seen = t->callers[address_slot<Tuner::kCallerBits>(tuner)];
  if (seen.tuner != tuner) {
    Py_XSETREF(seen.tuner, Py_NewRef(tuner));
    seen.cache_size = -1;
  }
  return seen;
}

// `len(tuner.cache)`, or -2 when it is not a dict (then never "changed").
Py_ssize_t cache_size(PyObject* tuner) {
  Ref cache(PyObject_GetAttr(tuner, g_call_names.cache));
  if (!cache) {
    PyErr_Clear();
    return -2;
  }
  return PyDict_Check(cache.get()) ? PyDict_GET_SIZE(cache.get()) : -2;
}

TL_COLD PyObject* new_stack(PyObject* config) {
  Ref stack(PyObject_CallNoArgs(PyTuple_GET_ITEM(config, STACK)));
  if (stack && !PyList_CheckExact(stack.get())) {
    PyErr_SetString(PyExc_TypeError, "a thread's frame stack must be a list");
    return nullptr;
  }
  return stack.release();
}

// The slots of a frame made from an autotuner's Python frame, `Frame(tuner, key, (), 0, launch, True,
// tuned=key is not None)` (`key` nullptr: unbound, None in the frame; `empty` and `zero`: () and 0).
void caller_frame_values(PyObject* tuner, PyObject* key, PyObject* launch, PyObject* empty, PyObject* zero,
                         PyObject* (&values)[NFRAME]) {
  PyObject* tuned = key != nullptr ? Py_True : Py_False;
  PyObject* made[NFRAME] = {tuner,   key != nullptr ? key : Py_None, empty,   zero,    launch, Py_True,
                            Py_None, tuned,                          Py_None, Py_None, Py_None};
  std::memcpy(values, made, sizeof(made));
}

// A caller frame (`CallerFrame`) as `framed_from` hands it to the launcher: `push` makes it the `Frame` a
// tuned call's would be, `launch` False (no handle wanted), and appends it to the stack. Its frame, once
// made, is dropped with it.
struct PendingCaller : CallerFrame {
  PyTypeObject* type;
  const Py_ssize_t* offsets;

  PendingCaller(PyObject* tuner_, PyObject* key_, PyObject* stack_, PyTypeObject* type_, const Py_ssize_t* offsets_)
      : CallerFrame{tuner_, key_, stack_, &PendingCaller::make}, type(type_), offsets(offsets_) {}
  ~PendingCaller() { Py_CLEAR(frame); }
  PendingCaller(const PendingCaller&) = delete;
  PendingCaller& operator=(const PendingCaller&) = delete;

  static int make(CallerFrame* c) {
    PendingCaller* p = static_cast<PendingCaller*>(c);
    Ref empty(PyTuple_New(0));
    Ref zero(PyLong_FromLong(0));
    if (!empty || !zero) return -1;
    PyObject* values[NFRAME];
    caller_frame_values(p->tuner, p->key, Py_False, empty.get(), zero.get(), values);
    Ref made(new_frame(p->type, p->offsets, values));
    if (!made || PyList_Append(p->stack, made.get()) < 0) return -1;
    p->frame = made.release();
    return 0;
  }
};

// The launch with `tuner`'s frame (`key`: its tuning key, or nullptr when unbound) on this thread's stack.
// `code` is `Autotuner.run`'s: its running frame's object is made only when this call may have tuned, which
// `may_have_tuned` tells (1 or 0: `pruned_configs` was bound in that frame, read in place) or, when -1, the
// autotuner's cache having changed size since its last launch framed here. A call that cannot have tuned has
// its frame handed to the launcher instead (`PendingCaller`), made and pushed only if the launch needs it.
PyObject* framed_from(Tuner* t, PyObject* config, PyObject* code, PyObject* tuner, PyObject* key, int may_have_tuned,
                      PyObject* launcher, PyObject* const* args, Py_ssize_t n, PyObject* kwnames) {
  TL_STAMP(entered);
  bool changed = may_have_tuned > 0;
  if (may_have_tuned < 0) {
    Py_ssize_t size = cache_size(tuner);
    changed = size != caller_seen(t, tuner).cache_size;
  }
  Ref stack(t->local_dict.get(PyTuple_GET_ITEM(config, LOCAL), g_call_names.stack));
  if (!stack) return nullptr;
  if (!PyList_CheckExact(stack.get())) {
    stack.reset(new_stack(config));
    if (!stack) return nullptr;
  }
  PyTypeObject* frame_type = reinterpret_cast<PyTypeObject*>(PyTuple_GET_ITEM(config, FRAME_TYPE));
  Py_ssize_t offsets[NFRAME];  // this call's: a configuration meanwhile may change the tuner's
  std::memcpy(offsets, t->offsets, sizeof(offsets));
  if (!changed) {
    // The launch's frame handed to the launcher, made only if the launch is not steady (`CallerFrame`).
    PendingCaller pending(tuner, key, stack.get(), frame_type, offsets);
    ++t->caller_framed;
    TL_PART(PART_CALLER_BEFORE, entered);
    Ref result(launch_vector(launcher, args, n, kwnames, &pending));
    TL_STAMP(ran);
    if (pending.frame == nullptr) {
      TL_PART(PART_CALLER_AFTER, ran);
      return result.release();
    }
    ++t->caller_made;
    PyObject *type, *value, *tb;  // `finally`: off the stack, also when the launch raised
    PyErr_Fetch(&type, &value, &tb);
    int popped = pop_frame(stack.get());
    Py_CLEAR(pending.frame);  // before the run's exception is restored
    TL_PART(PART_CALLER_AFTER, ran);
    return end_finally(popped, result, type, value, tb);
  }
  Ref empty(PyTuple_New(0));
  Ref zero(PyLong_FromLong(0));
  if (!empty || !zero) return nullptr;
  PyObject* values[NFRAME];
  caller_frame_values(tuner, key, Py_None, empty.get(), zero.get(), values);
  FrameLease lease(t, frame_type, offsets, values);
  Ref& frame = lease.frame;
  if (!frame) return nullptr;
  if (PyList_Append(stack.get(), frame.get()) < 0) return nullptr;
  ++t->caller_framed;
  TL_PART(PART_CALLER_BEFORE, entered);
  Ref result(launch_vector(launcher, args, n, kwnames));
  TL_STAMP(ran);
  // `finally`: off the stack, then whether this call tuned, also when the launch raised.
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  int popped = pop_frame(stack.get());
  if (popped == 0 && changed) {
    if (may_have_tuned < 0) caller_seen(t, tuner).cache_size = cache_size(tuner);
    PyFrameObject* caller = running_frame_of(code);  // still the autotuner's: this C call is its
    Ref done(caller != nullptr ? call_n(PyTuple_GET_ITEM(config, CALLER_AFTER),
                                        {tuner, frame.get(), reinterpret_cast<PyObject*>(caller)})
                               : nullptr);
    popped = done ? 0 : -1;
    if (caller == nullptr && !PyErr_Occurred())
      PyErr_SetString(PyExc_RuntimeError, "the autotuner's frame was not running after its launch");
  }
  TL_PART(PART_CALLER_AFTER, ran);
  return end_finally(popped, result, type, value, tb);
}

// Whether the variables read in place (`tuner`, `key`, `pruned`) are those `PyFrame_GetVar` reads in the
// running frame (`code`'s): asked of a tuner's first launch read in place after each configuration. The frame's
// object is made for it once; -1 and an exception when reading failed.
TL_COLD int same_as_frame_reads(PyObject* code, PyObject* tuner, PyObject* key, PyObject* pruned) {
  PyFrameObject* caller = running_frame_of(code);
  if (caller == nullptr) return PyErr_Occurred() ? -1 : 0;
  Ref self_read(frame_var(caller, g_call_names.self));
  if (!self_read && PyErr_Occurred()) return -1;
  Ref key_read(frame_var(caller, g_call_names.key));
  if (!key_read && PyErr_Occurred()) return -1;
  Ref pruned_read(frame_var(caller, g_call_names.pruned_configs));
  if (!pruned_read && PyErr_Occurred()) return -1;
  return self_read.get() == tuner && key_read.get() == key && pruned_read.get() == pruned;
}

PyObject* caller_framed_launch(PyObject* self, PyObject* launcher, PyObject* const* args, Py_ssize_t n,
                               PyObject* kwnames) {
  Tuner* t = reinterpret_cast<Tuner*>(self);
  if (t->config == nullptr || PyTuple_GET_ITEM(t->config, CALLER_CODE) == Py_None)
    return launch_vector(launcher, args, n, kwnames);
  Ref config(Py_NewRef(t->config));
  PyObject* code = PyTuple_GET_ITEM(config.get(), CALLER_CODE);
  Ref tuner, key;
  int may_have_tuned = -1;
  if (t->in_place >= 0) {
    // Only when the running Python code is Triton's `Autotuner.run`: its `self`, its tuning `key`, and
    // `pruned_configs`, bound only when the call did not find its key in the cache (`compat.AUTOTUNER_RUN_LOCALS`).
    InterpreterFrameHead* head = running_head_of(code);
    if (head == nullptr) return launch_vector(launcher, args, n, kwnames);
    tuner.reset(Py_XNewRef(var_in_place(head, t->self_place)));
    key.reset(Py_XNewRef(var_in_place(head, t->key_place)));
    PyObject* pruned = var_in_place(head, t->pruned_place);
    if (t->in_place == 0) {
      int same = same_as_frame_reads(code, tuner.get(), key.get(), pruned);
      if (same < 0) return nullptr;
      t->in_place = same ? 1 : -1;
    }
    if (t->in_place > 0) {
      ++t->caller_in_place;
      may_have_tuned = pruned != nullptr;
    }
  }
  if (t->in_place < 0) {
    // The same through the frame's object (made if it had none): Python 3.11, or what was read in place
    // differed from it.
    PyFrameObject* caller = running_frame_of(code);
    if (caller == nullptr) return launch_vector(launcher, args, n, kwnames);
    tuner.reset(frame_var(caller, g_call_names.self));
    key.reset(tuner ? frame_var(caller, g_call_names.key) : nullptr);
    PyErr_Clear();  // what cannot be read here (never seen) leaves the launch unframed rather than failing it
  }
  if (!tuner) return launch_vector(launcher, args, n, kwnames);
  try {
    return framed_from(t, config.get(), code, tuner.get(), key.get(), may_have_tuned, launcher, args, n, kwnames);
  } catch (...) {  // nothing here throws; a C++ exception must not cross into Python
    PyErr_SetString(PyExc_RuntimeError, "TileLens's compiled tuner failed");
    return nullptr;
  }
}

PyObject* tuner_new(PyTypeObject* type, PyObject* args, PyObject*) {
  PyObject* slow;
  if (!PyArg_ParseTuple(args, "O:Tuner", &slow)) return nullptr;
  Tuner* t = PyObject_GC_New(Tuner, type);
  if (t == nullptr) return nullptr;
  t->vectorcall = tuner_vectorcall;
  t->slow = Py_NewRef(slow);
  t->config = nullptr;
  std::memset(t->offsets, 0, sizeof(t->offsets));
  t->steady = t->fallbacks = 0;
  t->local_dict = LocalDict{0, nullptr};
  t->grid_warmup = false;
  for (PyObject*& p : t->seen) p = nullptr;
  for (Tuner::CallerSeen& c : t->callers) c = Tuner::CallerSeen{nullptr, -1};
  t->caller_framed = 0;
  t->self_place = t->key_place = t->pruned_place = VarPlace{};
  t->in_place = -1;
  t->caller_in_place = 0;
  t->caller_made = 0;
  t->spare_frame = nullptr;
  PyObject_GC_Track(t);
  return reinterpret_cast<PyObject*>(t);
}

// configure(plans, local, run, tuned, frame_type, reserved[, caller_code, caller_after, stack]) enables;
// configure() disables. With `caller_code` (Triton's `Autotuner.run.__code__`, or None), `caller_after` and
// `stack` (the thread's frame stack, made when it has none), an `Intercept` given this tuner as its `caller`
// frames the launches that code makes (`caller_framed_launch`).
PyObject* tuner_configure(PyObject* self, PyObject* args) {
  Tuner* t = reinterpret_cast<Tuner*>(self);
  Py_ssize_t n = PyTuple_GET_SIZE(args);
  if (n != 0 && n != NTUNER_FRAMED && n != NTUNER) {
    PyErr_Format(PyExc_TypeError, "configure() takes 0, %d or %d arguments", static_cast<int>(NTUNER_FRAMED),
                 static_cast<int>(NTUNER));
    return nullptr;
  }
  t->local_dict.reset();  // another LOCAL, or none
  for (Tuner::CallerSeen& c : t->callers) Py_CLEAR(c.tuner);
  for (PyObject*& p : t->seen) Py_CLEAR(p);  // another PLANS, or none
  Py_CLEAR(t->spare_frame);  // perhaps another frame class
  if (n == 0) {
    Py_CLEAR(t->config);
    Py_RETURN_NONE;
  }
  if (!PyDict_Check(PyTuple_GET_ITEM(args, PLANS)) || !PyAnySet_Check(PyTuple_GET_ITEM(args, RESERVED))) {
    PyErr_SetString(PyExc_TypeError, "plans must be a dict and reserved a set");
    return nullptr;
  }
  Py_ssize_t offsets[NFRAME];
  if (!frame_offsets(PyTuple_GET_ITEM(args, FRAME_TYPE), offsets)) return nullptr;
  std::memcpy(t->offsets, offsets, sizeof(offsets));
  int has_grid = PySet_Contains(PyTuple_GET_ITEM(args, RESERVED), g_call_names.grid);
  int has_warmup = has_grid < 0 ? -1 : PySet_Contains(PyTuple_GET_ITEM(args, RESERVED), g_call_names.warmup);
  if (has_warmup < 0) return nullptr;
  t->grid_warmup = has_grid == 1 && has_warmup == 1;
  Ref config(n == NTUNER ? Py_NewRef(args) : PyTuple_New(NTUNER));
  if (!config) return nullptr;
  if (n != NTUNER) {
    for (int i = 0; i < NTUNER; ++i)
      PyTuple_SET_ITEM(config.get(), i, Py_NewRef(i < n ? PyTuple_GET_ITEM(args, i) : Py_None));
  }
  PyObject* code = PyTuple_GET_ITEM(config.get(), CALLER_CODE);
  t->self_place = var_place(code, g_call_names.self);
  t->key_place = var_place(code, g_call_names.key);
  t->pruned_place = var_place(code, g_call_names.pruned_configs);
  t->in_place = t->self_place.at >= 0 && t->key_place.at >= 0 && t->pruned_place.at >= 0 ? 0 : -1;
  Py_XSETREF(t->config, config.release());
  Py_RETURN_NONE;
}

PyObject* tuner_enabled(PyObject* self, void*) {
  return PyBool_FromLong(reinterpret_cast<Tuner*>(self)->config != nullptr);
}

PyMethodDef tuner_methods[] = {
    {"configure", tuner_configure, METH_VARARGS,
     "configure(plans, local, run, tuned, frame_type, reserved[, caller_code, caller_after, stack]) or configure()"},
    {nullptr, nullptr, 0, nullptr}};

PyMemberDef tuner_members[] = {
    {"steady", T_PYSSIZET, offsetof(Tuner, steady), READONLY, "calls framed here"},
    {"fallbacks", T_PYSSIZET, offsetof(Tuner, fallbacks), READONLY, "calls given to Python"},
    {"caller_framed", T_PYSSIZET, offsetof(Tuner, caller_framed), READONLY,
     "launches framed from their autotuner's Python frame"},
    {"caller_in_place", T_PYSSIZET, offsetof(Tuner, caller_in_place), READONLY,
     "of those, launches whose autotuner's variables were read in its running frame, without its frame object"},
    {"caller_made", T_PYSSIZET, offsetof(Tuner, caller_made), READONLY,
     "of those, launches of calls that did not tune whose frame the launcher needed made (not steady)"},
    {nullptr, 0, 0, 0, nullptr}};

PyObject* tuner_spare(PyObject* self, void*) {
  PyObject* spare = reinterpret_cast<Tuner*>(self)->spare_frame;
  return Py_NewRef(spare != nullptr ? spare : Py_None);
}

PyGetSetDef tuner_getset[] = {
    {"enabled", tuner_enabled, nullptr, "whether calls are framed here", nullptr},
    {"spare", tuner_spare, nullptr, "the emptied frame the next call takes (a diagnostic), or None", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

int add_type(PyObject* module, PyTypeObject* type, const char* name) {
  if (PyType_Ready(type) < 0) return -1;
  Py_INCREF(type);
  if (PyModule_AddObject(module, name, reinterpret_cast<PyObject*>(type)) < 0) {
    Py_DECREF(type);
    return -1;
  }
  return 0;
}

}  // namespace

// The offsets of `type`'s slots named in `names`; false (and a TypeError naming the class as `what`) unless
// each is a plain object slot of a class without `__dict__`.
bool slot_offsets(PyObject* type_object, const char* const* names, int n, Py_ssize_t* offsets, const char* what) {
  if (!PyType_Check(type_object)) {
    PyErr_Format(PyExc_TypeError, "the %s type must be a class", what);
    return false;
  }
  PyTypeObject* type = reinterpret_cast<PyTypeObject*>(type_object);
  if (type->tp_dictoffset != 0 || type->tp_alloc == nullptr || type->tp_itemsize != 0) {
    PyErr_Format(PyExc_TypeError, "the %s type must have slots only", what);
    return false;
  }
  for (int i = 0; i < n; ++i) {
    Ref descr(PyObject_GetAttrString(type_object, names[i]));
    if (!descr) return false;
    if (!Py_IS_TYPE(descr.get(), &PyMemberDescr_Type)) {
      PyErr_Format(PyExc_TypeError, "the %s type's %s is not a slot", what, names[i]);
      return false;
    }
    PyMemberDef* member = reinterpret_cast<PyMemberDescrObject*>(descr.get())->d_member;
    if (member->type != T_OBJECT_EX || member->offset <= 0 ||
        member->offset + static_cast<Py_ssize_t>(sizeof(PyObject*)) > type->tp_basicsize) {
      PyErr_Format(PyExc_TypeError, "the %s type's %s is not an object slot", what, names[i]);
      return false;
    }
    offsets[i] = member->offset;
  }
  return true;
}

bool frame_offsets(PyObject* type_object, Py_ssize_t* offsets) {
  return slot_offsets(type_object, kFrameFields, NFRAME, offsets, "frame");
}

int add_call_types(PyObject* module) {
  const char* names[] = {"_tilelens_trace", "launch", "warmup", "configs", "cache", "stack", "configs_timings",
                         "grid", "self", "key", "pruned_configs"};
  PyObject** slots[] = {&g_call_names.trace,  &g_call_names.launch, &g_call_names.warmup,
                        &g_call_names.configs, &g_call_names.cache, &g_call_names.stack,
                        &g_call_names.configs_timings, &g_call_names.grid, &g_call_names.self,
                        &g_call_names.key, &g_call_names.pruned_configs};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); ++i) {
    *slots[i] = PyUnicode_InternFromString(names[i]);
    if (*slots[i] == nullptr) return -1;
  }
  InterceptType.tp_name = "_tilelens_capture.Intercept";
  InterceptType.tp_basicsize = sizeof(Intercept);
  InterceptType.tp_dealloc = tilelens_native::gc_dealloc;
  InterceptType.tp_traverse = intercept_traverse;
  InterceptType.tp_clear = intercept_clear;
  InterceptType.tp_new = intercept_new;
  InterceptType.tp_call = PyVectorcall_Call;
  InterceptType.tp_vectorcall_offset = offsetof(Intercept, vectorcall);
  InterceptType.tp_descr_get = intercept_get;
  InterceptType.tp_members = intercept_members;
  InterceptType.tp_flags =
      Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR;
  InterceptType.tp_doc = "A Triton run method intercepted for a compiled recording (see native_calls.cpp).";
  TunerType.tp_name = "_tilelens_capture.Tuner";
  TunerType.tp_basicsize = sizeof(Tuner);
  TunerType.tp_dealloc = tilelens_native::gc_dealloc;
  TunerType.tp_traverse = tuner_traverse;
  TunerType.tp_clear = tuner_clear;
  TunerType.tp_new = tuner_new;
  TunerType.tp_call = PyVectorcall_Call;
  TunerType.tp_vectorcall_offset = offsetof(Tuner, vectorcall);
  TunerType.tp_methods = tuner_methods;
  TunerType.tp_members = tuner_members;
  TunerType.tp_getset = tuner_getset;
  TunerType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL;
  TunerType.tp_doc = "An autotuner's call framed for a compiled recording (see native_calls.cpp).";
  static PyMethodDef defs[] = {
      {"marks_added", marks_added, METH_NOARGS, "marks_added(): TileLens marked a layer `_tilelens_trace` just now"},
      {"locals_changed", locals_changed, METH_NOARGS,
       "locals_changed(): a thread-local attribute TileLens reads was set or deleted just now"},
      {nullptr, nullptr, 0, nullptr}};
  if (PyModule_AddFunctions(module, defs) < 0) return -1;
  if (add_type(module, &InterceptType, "Intercept") < 0) return -1;
  return add_type(module, &TunerType, "Tuner");
}

}  // namespace tilelens_native
