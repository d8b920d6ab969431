// Many small files read (or sized) by a few native threads, the GIL released for the whole batch.
//
// Python's per-file loop (open, pread, close through the os module) costs about 26 us a file with the
// GIL taken back after every syscall; more Python threads only contend for it (dataset B, 4096 files
// of 80 KB: docs/performance.md). Nothing in the stack batches local file reads: kvikio opens a CuFile
// per file from Python. Errors are reported per file; the caller decides what a failure means.

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_THREADS 64

typedef struct {
    const char** paths;
    const int64_t *offsets, *sizes, *starts;  // read: each file's bytes and where they land
    uint8_t* buf;
    int64_t* out_sizes;  // sized: each file's size (-1: it does not exist)
    int32_t* err;        // 0, an errno, or -1 for a short read (the file ended before the range did)
    Py_ssize_t n;
    Py_ssize_t next;  // the next file a thread takes (atomic)
} batch;

static void read_one(batch* b, Py_ssize_t i) {
    int fd = open(b->paths[i], O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        b->err[i] = errno;
        return;
    }
    int64_t got = 0, want = b->sizes[i];
    while (got < want) {  // a pread may return less than asked (signals, reads over 2 GiB)
        ssize_t k = pread(fd, b->buf + b->starts[i] + got, (size_t)(want - got), b->offsets[i] + got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            b->err[i] = k < 0 ? errno : -1;
            break;
        }
        got += k;
    }
    close(fd);
}

static void size_one(batch* b, Py_ssize_t i) {
    struct stat st;
    b->out_sizes[i] = -1;
    if (stat(b->paths[i], &st) < 0)
        b->err[i] = errno == ENOENT ? 0 : errno;
    else if (!S_ISREG(st.st_mode))  // a directory's size is no chunk's
        b->err[i] = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
    else
        b->out_sizes[i] = st.st_size;
}

typedef struct {
    batch* b;
    void (*one)(batch*, Py_ssize_t);
} job;

static void* worker(void* arg) {
    job* j = arg;
    for (;;) {
        Py_ssize_t i = __atomic_fetch_add(&j->b->next, 1, __ATOMIC_RELAXED);
        if (i >= j->b->n) return NULL;
        j->one(j->b, i);
    }
}

static void run(batch* b, void (*one)(batch*, Py_ssize_t), int threads) {
    job j = {b, one};
    pthread_t t[MAX_THREADS];
    int started = 0;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads > b->n) threads = (int)b->n;
    while (started < threads - 1 && pthread_create(&t[started], NULL, worker, &j) == 0) started++;
    worker(&j);  // this thread works too; fewer threads than asked if the system has none to give
    for (int k = 0; k < started; k++) pthread_join(t[k], NULL);
}

// Holds the encoded paths while the GIL is released.
typedef struct {
    PyObject** held;
    const char** paths;
    Py_ssize_t n;
} pathlist;

static void paths_free(pathlist* p) {
    for (Py_ssize_t i = 0; i < p->n; i++) Py_XDECREF(p->held[i]);
    PyMem_Free(p->held);
    PyMem_Free(p->paths);
}

static int paths_get(PyObject* seq, pathlist* p) {
    PyObject* fast = PySequence_Fast(seq, "paths must be a sequence");
    if (!fast) return 0;
    p->n = 0;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    p->held = PyMem_Calloc(n ? n : 1, sizeof(PyObject*));
    p->paths = PyMem_Calloc(n ? n : 1, sizeof(char*));
    if (!p->held || !p->paths) {
        Py_DECREF(fast);
        paths_free(p);
        PyErr_NoMemory();
        return 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyUnicode_FSConverter(PySequence_Fast_GET_ITEM(fast, i), &p->held[i])) {
            Py_DECREF(fast);
            paths_free(p);
            return 0;
        }
        p->n = i + 1;
        p->paths[i] = PyBytes_AS_STRING(p->held[i]);
    }
    Py_DECREF(fast);
    return 1;
}

// A contiguous buffer of `n` items of `itemsize` bytes (writable if asked).
static int view(PyObject* o, Py_buffer* v, Py_ssize_t n, Py_ssize_t itemsize, int writable, const char* what) {
    if (PyObject_GetBuffer(o, v, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0) return 0;
    if (v->len != n * itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes, expected %zd", what, v->len, n * itemsize);
        PyBuffer_Release(v);
        return 0;
    }
    return 1;
}

static PyObject* py_read(PyObject* self, PyObject* args) {
    PyObject *obuf, *opaths, *ooff, *osize, *ostart, *oerr;
    int threads;
    if (!PyArg_ParseTuple(args, "OOOOOOi", &obuf, &opaths, &ooff, &osize, &ostart, &oerr, &threads)) return NULL;
    pathlist p;
    if (!paths_get(opaths, &p)) return NULL;
    Py_buffer vbuf = {0}, voff = {0}, vsize = {0}, vstart = {0}, verr = {0};
    PyObject* result = NULL;
    if (PyObject_GetBuffer(obuf, &vbuf, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) goto done;
    if (!view(ooff, &voff, p.n, 8, 0, "offsets") || !view(osize, &vsize, p.n, 8, 0, "sizes") ||
        !view(ostart, &vstart, p.n, 8, 0, "starts") || !view(oerr, &verr, p.n, 4, 1, "errors"))
        goto done;
    const int64_t *off = voff.buf, *size = vsize.buf, *start = vstart.buf;
    for (Py_ssize_t i = 0; i < p.n; i++)
        if (off[i] < 0 || size[i] < 0 || start[i] < 0 || start[i] > vbuf.len - size[i]) {
            PyErr_Format(PyExc_ValueError, "read %zd (%s) does not fit the buffer", i, p.paths[i]);
            goto done;
        }
    batch b = {p.paths, off, size, start, vbuf.buf, NULL, verr.buf, p.n, 0};
    memset(verr.buf, 0, verr.len);
    Py_BEGIN_ALLOW_THREADS
    run(&b, read_one, threads);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&vbuf);
    PyBuffer_Release(&voff);
    PyBuffer_Release(&vsize);
    PyBuffer_Release(&vstart);
    PyBuffer_Release(&verr);
    paths_free(&p);
    return result;
}

static PyObject* py_sizes(PyObject* self, PyObject* args) {
    PyObject *opaths, *osizes, *oerr;
    int threads;
    if (!PyArg_ParseTuple(args, "OOOi", &opaths, &osizes, &oerr, &threads)) return NULL;
    pathlist p;
    if (!paths_get(opaths, &p)) return NULL;
    Py_buffer vsizes = {0}, verr = {0};
    PyObject* result = NULL;
    if (view(osizes, &vsizes, p.n, 8, 1, "sizes") && view(oerr, &verr, p.n, 4, 1, "errors")) {
        batch b = {p.paths, NULL, NULL, NULL, NULL, vsizes.buf, verr.buf, p.n, 0};
        memset(verr.buf, 0, verr.len);
        Py_BEGIN_ALLOW_THREADS
        run(&b, size_one, threads);
        Py_END_ALLOW_THREADS
        result = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&vsizes);
    PyBuffer_Release(&verr);
    paths_free(&p);
    return result;
}

static PyMethodDef methods[] = {
    {"read", py_read, METH_VARARGS,
     "read(buf, paths, offsets, sizes, starts, errors, threads): sizes[i] bytes at offsets[i] of paths[i] "
     "into buf[starts[i]:], on `threads` threads without the GIL; errors[i] (int32) becomes 0, an errno, "
     "or -1 where the file ended first."},
    {"sizes", py_sizes, METH_VARARGS,
     "sizes(paths, sizes, errors, threads): each file's size into sizes (int64; -1 where it does not "
     "exist), errors (int32) 0 or an errno."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_preads", NULL, -1, methods};

PyMODINIT_FUNC PyInit__preads(void) { return PyModule_Create(&module); }
