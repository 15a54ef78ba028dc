// kernels/common/kgraph.cu — streams and CUDA-graph capture for host C code (see
// kgraph.h).
#include <cuda_runtime.h>

#include <cstdlib>

#include "kernels/common/kgraph.h"

struct kgraph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
};

static int cuda_fail(const char *what, cudaError_t err)
{
    return kernels_fail("%s failed: %s", what, cudaGetErrorString(err));
}

extern "C" int kstream_create(void **stream, int non_blocking)
{
    cudaStream_t s = nullptr;
    cudaError_t err = cudaStreamCreateWithFlags(&s, non_blocking ? cudaStreamNonBlocking : cudaStreamDefault);
    *stream = err == cudaSuccess ? (void *)s : nullptr;
    return err == cudaSuccess ? 0 : cuda_fail("kstream_create: cudaStreamCreateWithFlags", err);
}

extern "C" void kstream_destroy(void *stream)
{
    if (stream) cudaStreamDestroy((cudaStream_t)stream); // nothing useful to do on failure
}

extern "C" int kstream_synchronize(void *stream)
{
    cudaError_t err = cudaStreamSynchronize((cudaStream_t)stream);
    return err == cudaSuccess ? 0 : cuda_fail("kstream_synchronize: cudaStreamSynchronize", err);
}

extern "C" int kgraph_capture_begin(void *stream)
{
    if (!stream) return kernels_fail("kgraph_capture_begin: the legacy default stream cannot be captured");
    cudaError_t err = cudaStreamBeginCapture((cudaStream_t)stream, cudaStreamCaptureModeGlobal);
    return err == cudaSuccess ? 0 : cuda_fail("kgraph_capture_begin: cudaStreamBeginCapture", err);
}

extern "C" int kgraph_capture_end(void *stream, kgraph **graph)
{
    *graph = nullptr;
    cudaGraph_t g = nullptr;
    cudaError_t err = cudaStreamEndCapture((cudaStream_t)stream, &g);
    if (err != cudaSuccess) {
        if (g) cudaGraphDestroy(g);
        cudaGetLastError(); // an invalidated capture leaves its error behind: the report below carries it
        return cuda_fail("kgraph_capture_end: cudaStreamEndCapture", err);
    }
    kgraph *k = (kgraph *)calloc(1, sizeof *k);
    if (!k) {
        cudaGraphDestroy(g);
        return kernels_fail("kgraph_capture_end: out of host memory");
    }
    k->graph = g;
    err = cudaGraphInstantiate(&k->exec, g, 0);
    if (err != cudaSuccess) {
        cudaGraphDestroy(g);
        free(k);
        return cuda_fail("kgraph_capture_end: cudaGraphInstantiate", err);
    }
    *graph = k;
    return 0;
}

extern "C" int kgraph_launch(kgraph *graph, void *stream)
{
    if (!graph) return kernels_fail("kgraph_launch: no graph");
    cudaError_t err = cudaGraphLaunch(graph->exec, (cudaStream_t)stream);
    return err == cudaSuccess ? 0 : cuda_fail("kgraph_launch: cudaGraphLaunch", err);
}

extern "C" int kgraph_node_count(kgraph *graph, size_t *nodes)
{
    if (!graph) return kernels_fail("kgraph_node_count: no graph");
    cudaError_t err = cudaGraphGetNodes(graph->graph, nullptr, nodes);
    return err == cudaSuccess ? 0 : cuda_fail("kgraph_node_count: cudaGraphGetNodes", err);
}

extern "C" void kgraph_destroy(kgraph *graph)
{
    if (!graph) return;
    cudaGraphExecDestroy(graph->exec);
    cudaGraphDestroy(graph->graph);
    free(graph);
}
