/* dsrt_capi.i -- SWIG interface for the raw module dsrt.capi, over include/dsrt.h only.
 *
 * Conventions of the raw module (the Pythonic layer in dsrt/_core.py builds on them):
 * - every dsrt_status function returns the status first, then its out-parameters:
 *   capi.dsrt_config_parse(text) -> [status, handle]; handles are SWIG pointer objects (None on failure);
 * - array arguments (init, out, src, shape, NCCL ids) are raw addresses (Python ints, e.g.
 *   numpy_array.ctypes.data), so data never passes through Python objects;
 * - char ** results come back as str and are freed with dsrt_free here;
 * - acquire/grad return the buffer address as an int and the dtype;
 * - the GIL is released around every call (swig -threads), so long steps and collectives do not
 *   block other Python threads.
 */
%module(package="dsrt", threads="1") capi

%{
#include <stdint.h>
#include <string.h>
#include "dsrt.h"
%}

%include <stdint.i>

/* ---- handles returned through T **out ------------------------------------------------------ */
%define DSRT_HANDLE_OUT(TYPE)
%typemap(in, numinputs=0) TYPE **out (TYPE *tmp = NULL) { $1 = &tmp; }
%typemap(argout) TYPE **out {
  $result = SWIG_Python_AppendOutput($result, SWIG_NewPointerObj(SWIG_as_voidptr(*$1), $*1_descriptor, 0));
}
%enddef
DSRT_HANDLE_OUT(dsrt_config)
DSRT_HANDLE_OUT(dsrt_comm)
DSRT_HANDLE_OUT(dsrt_engine)
DSRT_HANDLE_OUT(dsrt_tensor)
DSRT_HANDLE_OUT(dsrt_checkpoint)

/* ---- strings the library allocates ---------------------------------------------------------- */
%typemap(in, numinputs=0) char **out (char *tmp = NULL) { $1 = &tmp; }
%typemap(argout) char **out {
  PyObject *text;
  if (*$1 != NULL) {
    text = PyUnicode_FromString(*$1);
    dsrt_free(*$1);
  } else {
    Py_INCREF(Py_None);
    text = Py_None;
  }
  $result = SWIG_Python_AppendOutput($result, text);
}

/* ---- scalar out-parameters ------------------------------------------------------------------ */
%typemap(in, numinputs=0) double *out (double tmp = 0) { $1 = &tmp; }
%typemap(argout) double *out { $result = SWIG_Python_AppendOutput($result, PyFloat_FromDouble(*$1)); }
%typemap(in, numinputs=0) int32_t *out (int32_t tmp = 0) { $1 = &tmp; }
%typemap(argout) int32_t *out { $result = SWIG_Python_AppendOutput($result, PyLong_FromLong(*$1)); }
%typemap(in, numinputs=0) int64_t *out (int64_t tmp = 0) { $1 = &tmp; }
%typemap(argout) int64_t *out { $result = SWIG_Python_AppendOutput($result, PyLong_FromLongLong(*$1)); }
%typemap(in, numinputs=0) int32_t *device_type (int32_t tmp = 0), int32_t *device_index (int32_t tmp = 0),
                          int32_t *ndim (int32_t tmp = 0) { $1 = &tmp; }
%typemap(argout) int32_t *device_type, int32_t *device_index, int32_t *ndim {
  $result = SWIG_Python_AppendOutput($result, PyLong_FromLong(*$1));
}
%typemap(in, numinputs=0) void **data (void *tmp = NULL), void **grad (void *tmp = NULL) { $1 = &tmp; }
%typemap(argout) void **data, void **grad {
  $result = SWIG_Python_AppendOutput($result, PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)*$1));
}
%typemap(in, numinputs=0) dsrt_dtype *dtype (dsrt_dtype tmp = DSRT_F32) { $1 = &tmp; }
%typemap(argout) dsrt_dtype *dtype { $result = SWIG_Python_AppendOutput($result, PyLong_FromLong((long)*$1)); }

/* ---- raw addresses for arrays --------------------------------------------------------------- */
%define DSRT_ADDRESS_IN(DECL)
%typemap(in) DECL {
  if ($input == Py_None) {
    $1 = NULL;
  } else {
    unsigned long long address = PyLong_AsUnsignedLongLong($input);
    if (PyErr_Occurred()) SWIG_fail;
    $1 = ($1_ltype)(uintptr_t)address;
  }
}
%typemap(typecheck) DECL { $1 = ($input == Py_None || PyLong_Check($input)) ? 1 : 0; }
%enddef
DSRT_ADDRESS_IN(const float *init)
DSRT_ADDRESS_IN(float *out)
DSRT_ADDRESS_IN(const float *src)
DSRT_ADDRESS_IN(const int64_t *shape)
DSRT_ADDRESS_IN(int64_t *shape)
DSRT_ADDRESS_IN(void *out128)
DSRT_ADDRESS_IN(const void *id128)
DSRT_ADDRESS_IN(void *cuda_stream)

/* dsrt_tensor_shape writes ndim values: Python uses dsrt_py_tensor_shape below. */
%ignore dsrt_tensor_shape;

/* Functions that build Python objects must hold the GIL. */
%nothread dsrt_py_tensor_shape;
%nothread dsrt_py_set_log_callback;
%nothread dsrt_py_dlpack_capsule;

/* ---- structs -------------------------------------------------------------------------------- */
%typemap(in, numinputs=0) dsrt_step_result *out (dsrt_step_result tmp) {
  memset(&tmp, 0, sizeof tmp);
  tmp.struct_size = sizeof tmp;
  $1 = &tmp;
}
%typemap(argout) dsrt_step_result *out {
  PyObject *d = Py_BuildValue("{s:L,s:i,s:i,s:d,s:d,s:d}", "global_step", (long long)$1->global_step,
                              "boundary", (int)$1->boundary, "overflow", (int)$1->overflow,
                              "grad_norm", $1->grad_norm, "lr", $1->lr, "loss_scale", $1->loss_scale);
  $result = SWIG_Python_AppendOutput($result, d);
}
%typemap(in, numinputs=0) dsrt_memory_stats *out (dsrt_memory_stats tmp) {
  memset(&tmp, 0, sizeof tmp);
  tmp.struct_size = sizeof tmp;
  $1 = &tmp;
}
%typemap(argout) dsrt_memory_stats *out {
  PyObject *d = PyDict_New();
  const char *names[5] = {"working_params", "gradients", "master_params", "optimizer_states", "buffers"};
  const uint64_t *rows[5] = {$1->working_params, $1->gradients, $1->master_params, $1->optimizer_states,
                             $1->buffers};
  for (int i = 0; i < 5; ++i) {
    PyObject *row = Py_BuildValue("(KKK)", (unsigned long long)rows[i][0], (unsigned long long)rows[i][1],
                                  (unsigned long long)rows[i][2]);
    PyDict_SetItemString(d, names[i], row);
    Py_DECREF(row);
  }
  $result = SWIG_Python_AppendOutput($result, d);
}

/* engine options: None, or a (device_type, device_index) tuple */
%typemap(in) const dsrt_engine_options *options (dsrt_engine_options tmp) {
  if ($input == Py_None) {
    $1 = NULL;
  } else {
    int device_type = 0, device_index = 0;
    if (!PyArg_ParseTuple($input, "ii", &device_type, &device_index)) SWIG_fail;
    memset(&tmp, 0, sizeof tmp);
    tmp.struct_size = sizeof tmp;
    tmp.device_type = device_type;
    tmp.device_index = device_index;
    $1 = &tmp;
  }
}
%typemap(typecheck) const dsrt_engine_options *options { $1 = ($input == Py_None || PyTuple_Check($input)) ? 1 : 0; }

/* client state: (const void **data, uint64_t *size) -> bytes */
%typemap(in, numinputs=0) (const void **data, uint64_t *size) (const void *tmp_data = NULL, uint64_t tmp_size = 0) {
  $1 = &tmp_data;
  $2 = &tmp_size;
}
%typemap(argout) (const void **data, uint64_t *size) {
  PyObject *blob = PyBytes_FromStringAndSize((const char *)(*$1 ? *$1 : ""), (Py_ssize_t)*$2);
  $result = SWIG_Python_AppendOutput($result, blob);
}
/* setter: (const void *data, uint64_t size) from any bytes-like object */
%typemap(in) (const void *data, uint64_t size) (Py_buffer view) {
  if (PyObject_GetBuffer($input, &view, PyBUF_SIMPLE) != 0) SWIG_fail;
  $1 = view.buf;
  $2 = (uint64_t)view.len;
}
%typemap(freearg) (const void *data, uint64_t size) { PyBuffer_Release(&view$argnum); }

/* ---- strings passed in ---------------------------------------------------------------------
 * str (UTF-8) or None (NULL). A string C would read differently from Python -- one with a NUL
 * character, which C would cut there, or one that is not valid Unicode (a lone surrogate, which
 * has no UTF-8 form) -- raises dsrt.InvalidArgumentError (a ValueError) instead of being cut or
 * failing with SWIG's TypeError. */
%{
static int dsrt_py_raise_invalid(const char *function, int argnum, const char *what) {
  PyObject *core = PyImport_ImportModule("dsrt._core");
  PyObject *cls = core ? PyObject_GetAttrString(core, "InvalidArgumentError") : NULL;
  Py_XDECREF(core);
  if (cls == NULL) return -1; /* the import error stands */
  PyObject *message = PyUnicode_FromFormat("%s: argument %d %s", function, argnum, what);
  PyObject *error = message ? PyObject_CallFunction(cls, "iO", (int)DSRT_ERR_INVALID_ARGUMENT, message) : NULL;
  if (error != NULL) PyErr_SetObject(cls, error);
  Py_XDECREF(error);
  Py_XDECREF(message);
  Py_DECREF(cls);
  return -1;
}
%}
%typemap(in) const char * (PyObject *utf8 = NULL) {
  if ($input == Py_None) {
    $1 = NULL;
  } else if (PyUnicode_Check($input)) {
    utf8 = PyUnicode_AsUTF8String($input);
    if (utf8 == NULL) {
      PyErr_Clear();
      dsrt_py_raise_invalid("$symname", $argnum, "is not valid Unicode (a lone surrogate has no UTF-8 form)");
      SWIG_fail;
    }
    char *text = NULL;
    Py_ssize_t length = 0;
    if (PyBytes_AsStringAndSize(utf8, &text, &length) != 0) SWIG_fail;
    if ((size_t)length != strlen(text)) {
      dsrt_py_raise_invalid("$symname", $argnum, "contains a NUL character, where C would cut the text");
      SWIG_fail;
    }
    $1 = text;
  } else if (PyBytes_Check($input)) {
    char *text = NULL;
    Py_ssize_t length = 0;
    if (PyBytes_AsStringAndSize($input, &text, &length) != 0) SWIG_fail;
    if ((size_t)length != strlen(text)) {
      dsrt_py_raise_invalid("$symname", $argnum, "contains a NUL byte, where C would cut the text");
      SWIG_fail;
    }
    $1 = text;
  } else {
    PyErr_Format(PyExc_TypeError, "$symname: argument %d must be str, bytes or None, not %s", $argnum,
                 Py_TYPE($input)->tp_name);
    SWIG_fail;
  }
}
%typemap(freearg) const char * { Py_XDECREF(utf8$argnum); }
%typemap(typecheck, precedence=SWIG_TYPECHECK_STRING) const char * {
  $1 = ($input == Py_None || PyUnicode_Check($input) || PyBytes_Check($input)) ? 1 : 0;
}

/* The log callback takes a C function pointer: Python uses dsrt_py_set_log_callback below. */
%ignore dsrt_set_log_callback;

%include "dsrt.h"

/* ---- functions for the Pythonic layer --------------------------------------------------------- */
%inline %{
/* The shape of a tensor as a tuple. */
static PyObject *dsrt_py_tensor_shape(const dsrt_tensor *tensor) {
  int64_t shape[8];
  int32_t ndim = dsrt_tensor_ndim(tensor);
  if (ndim < 0 || ndim > 8) Py_RETURN_NONE;
  if (dsrt_tensor_shape(tensor, shape) != DSRT_OK) Py_RETURN_NONE;
  PyObject *tuple = PyTuple_New(ndim);
  for (int32_t i = 0; i < ndim; ++i) PyTuple_SET_ITEM(tuple, i, PyLong_FromLongLong(shape[i]));
  return tuple;
}
%}

%{
static PyObject *g_log_callable = NULL;

static void dsrt_py_log_trampoline(int32_t level, const char *msg, void *user) {
  (void)user;
  PyGILState_STATE gil = PyGILState_Ensure();
  if (g_log_callable != NULL) {
    PyObject *result = PyObject_CallFunction(g_log_callable, "is", (int)level, msg);
    if (result == NULL) PyErr_Clear(); /* a failing Python logger must not break training */
    Py_XDECREF(result);
  }
  PyGILState_Release(gil);
}
%}

%inline %{
/* Route dsrt's log to a Python callable(level, message); None restores stderr. */
static PyObject *dsrt_py_set_log_callback(PyObject *callable) {
  if (callable != Py_None && !PyCallable_Check(callable)) {
    PyErr_SetString(PyExc_TypeError, "the log callback must be callable or None");
    return NULL;
  }
  Py_XDECREF(g_log_callable);
  g_log_callable = NULL;
  if (callable == Py_None) {
    dsrt_set_log_callback(NULL, NULL);
  } else {
    Py_INCREF(callable);
    g_log_callable = callable;
    dsrt_set_log_callback(dsrt_py_log_trampoline, NULL);
  }
  Py_RETURN_NONE;
}
%}

%include "dlpack.i"
%include "buffer.i"
