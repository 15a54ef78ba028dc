/* kernels/common/kgraph.h — streams and CUDA graphs for host C code: a stream to
 * make current (kernels_set_stream), and the capture of a sequence of op
 * calls into a graph that is then replayed with one launch.
 *
 * Capture records every launch the ops make on the current stream; nothing
 * runs until kgraph_launch.  A replay reads and writes the same device
 * addresses the captured calls were given, and uses the host-side arguments
 * (shapes, scalars such as alpha or eps, the planted bug) they had at
 * capture time: what changes between replays must live in device memory.
 * Ops that grow an internal workspace refuse to do so during a capture, so
 * make the same calls once before capturing (kernels.h).
 *
 * Capture runs in cudaStreamCaptureModeGlobal: a call anywhere in the
 * process that is not allowed during a capture (cudaMalloc, a synchronous
 * copy, cudaDeviceSynchronize) fails, and the capture with it.  Every
 * function returns 0 or -1 with kernels_last_error(). */
#ifndef ULPSCOPE_KERNELS_COMMON_KGRAPH_H
#define ULPSCOPE_KERNELS_COMMON_KGRAPH_H

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A new stream (a cudaStream_t).  non_blocking = 0: it synchronises with the
 * legacy default stream as usual, so work wrongly sent to the default
 * stream while this one is capturing is an error (the capture fails);
 * non_blocking = 1: cudaStreamNonBlocking, no implicit synchronisation. */
int kstream_create(void **stream, int non_blocking);
void kstream_destroy(void *stream);    /* safe on NULL */
int kstream_synchronize(void *stream); /* waits for the stream's work */

typedef struct kgraph kgraph;

/* Starts capturing `stream` (which must not be the legacy default stream). */
int kgraph_capture_begin(void *stream);
/* Ends the capture and instantiates the graph; on any failure (including a
 * capture that an illegal call invalidated) the capture is ended, *graph is
 * NULL and -1 is returned with the reason. */
int kgraph_capture_end(void *stream, kgraph **graph);
/* One replay of the whole graph on `stream` (asynchronous). */
int kgraph_launch(kgraph *graph, void *stream);
/* The number of nodes (kernels, copies, memsets) in the graph. */
int kgraph_node_count(kgraph *graph, size_t *nodes);
void kgraph_destroy(kgraph *graph); /* safe on NULL */

#ifdef __cplusplus
}
#endif
#endif
