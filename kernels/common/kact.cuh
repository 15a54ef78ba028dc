// kernels/common/kact.cuh — the activation kernels' shared body (device code, C++).
// An activation is a struct with
//   template <int VARIANT> static __device__ float f(float x);   forward
//   template <int VARIANT> static __device__ float df(float x);  f'(x)
// TA stores activations (x, y, the gradient branch g), TG gradients (dy, dx).
#ifndef ULPSCOPE_KERNELS_COMMON_KACT_CUH
#define ULPSCOPE_KERNELS_COMMON_KACT_CUH

#include "kernels/common/kelementwise.cuh"
#include "kernels/common/klaunch.cuh"

template <typename T> __host__ __device__ constexpr int kact_vec() { return 16 / (int)sizeof(T) > 8 ? 8 : 16 / (int)sizeof(T); }

// y = f(x); with store_grad (g != null) also g = f'(x).
template <class Act, int VAR, typename TA>
__global__ void kact_forward(TA *__restrict__ y, TA *__restrict__ g, const TA *__restrict__ x, const float *sx_p,
                             const float *sy_p, const float *sg_p, int64_t n, int bug)
{
    constexpr int V = kact_vec<TA>();
    const float sx = kscale_of(sx_p), sy = kscale_of(sy_p), sg = kscale_of(sg_p);
    kelem_loop<V>(
        n,
        [&](int64_t i) {
            float v[V], out[V];
            kelem_load_scaled<TA, V>(x, i, sx, v);
#pragma unroll
            for (int j = 0; j < V; j++) out[j] = Act::template f<VAR>(v[j]);
            kelem_store_scaled<TA, V>(y, i, out, sy, n, bug);
            if (g) {
#pragma unroll
                for (int j = 0; j < V; j++) out[j] = Act::template df<VAR>(v[j]);
                kelem_store_scaled<TA, V>(g, i, out, sg, n, bug);
            }
        },
        [&](int64_t i) {
            if (bug == KBUG_DROP_TERM && i == n - 1) return;
            float v = kload_scaled(x, i, sx);
            kstore_scaled(y, i, Act::template f<VAR>(v), sy, bug);
            if (g) kstore_scaled(g, i, Act::template df<VAR>(v), sg, bug);
        });
}

// dx = dy f'(x) (saved = x), or with store_grad dx = dy g (saved = g).
template <class Act, int VAR, bool FROM_GRAD, typename TA, typename TG>
__global__ void kact_backward(TG *__restrict__ dx, const TG *__restrict__ dy, const TA *__restrict__ saved,
                              const float *sdx_p, const float *sdy_p, const float *ss_p, int64_t n, int bug)
{
    constexpr int V = kact_vec<TA>() < kact_vec<TG>() ? kact_vec<TA>() : kact_vec<TG>();
    const float sdx = kscale_of(sdx_p), sdy = kscale_of(sdy_p), ss = kscale_of(ss_p);
    kelem_loop<V>(
        n,
        [&](int64_t i) {
            float d[V], s[V], out[V];
            kelem_load_scaled<TG, V>(dy, i, sdy, d);
            kelem_load_scaled<TA, V>(saved, i, ss, s);
#pragma unroll
            for (int j = 0; j < V; j++) out[j] = d[j] * (FROM_GRAD ? s[j] : Act::template df<VAR>(s[j]));
            kelem_store_scaled<TG, V>(dx, i, out, sdx, n, bug);
        },
        [&](int64_t i) {
            if (bug == KBUG_DROP_TERM && i == n - 1) return;
            float d = kload_scaled(dy, i, sdy), s = kload_scaled(saved, i, ss);
            kstore_scaled(dx, i, d * (FROM_GRAD ? s : Act::template df<VAR>(s)), sdx, bug);
        });
}

// Host side: validate, dispatch the path's types, launch.
template <class Act, int VAR>
int kact_forward_launch(const char *op, ktensor *y, ktensor *g, const ktensor *x)
{
    int64_t n = 0, n2 = 0;
    if (kelem_same_size(op, x, y, &n) || (g && kelem_same_size(op, x, g, &n2))) return -1;
    if (y->format != x->format || (g && g->format != x->format))
        return kernels_fail("%s forward: x, y and the stored gradient must share a format (%s)", op, prec_format_name(x->format));
    const int bug = kernels_planted_bug();
    switch (x->format) {
#define KACT_FWD(T)                                                                                             \
    kact_forward<Act, VAR, T><<<kelem_blocks(n, kact_vec<T>()), kElemBlock, 0, kstream()>>>(                    \
        (T *)y->data, g ? (T *)g->data : nullptr, (const T *)x->data, x->scale, y->scale, g ? g->scale : nullptr, n, bug);
    case PREC_FP32: KACT_FWD(float) break;
    case PREC_BF16: KACT_FWD(__nv_bfloat16) break;
    case PREC_FP16: KACT_FWD(__half) break;
    case PREC_E4M3: KACT_FWD(__nv_fp8_e4m3) break;
#undef KACT_FWD
    default: return kernels_fail("%s forward: no path stores activations in %s", op, prec_format_name(x->format));
    }
    return kelem_launched(op, n);
}

template <class Act, int VAR, bool FROM_GRAD>
int kact_backward_launch(const char *op, ktensor *dx, const ktensor *dy, const ktensor *saved)
{
    int64_t n = 0, n2 = 0;
    if (kelem_same_size(op, dy, dx, &n) || kelem_same_size(op, dy, saved, &n2)) return -1;
    if (dx->format != dy->format) return kernels_fail("%s backward: dx and dy must share a format", op);
    const int bug = kernels_planted_bug();
    const int fp8 = saved->format == PREC_E4M3;
    if (fp8 != (dy->format == PREC_E5M2) || (!fp8 && saved->format != dy->format))
        return kernels_fail("%s backward: formats %s (saved) and %s (dy) are not one path", op,
                            prec_format_name(saved->format), prec_format_name(dy->format));
    switch (dy->format) {
#define KACT_BWD(TA, TG)                                                                                         \
    kact_backward<Act, VAR, FROM_GRAD, TA, TG><<<kelem_blocks(n, 8), kElemBlock, 0, kstream()>>>(                \
        (TG *)dx->data, (const TG *)dy->data, (const TA *)saved->data, dx->scale, dy->scale, saved->scale, n, bug);
    case PREC_FP32: KACT_BWD(float, float) break;
    case PREC_BF16: KACT_BWD(__nv_bfloat16, __nv_bfloat16) break;
    case PREC_FP16: KACT_BWD(__half, __half) break;
    case PREC_E5M2: KACT_BWD(__nv_fp8_e4m3, __nv_fp8_e5m2) break;
#undef KACT_BWD
    default: return kernels_fail("%s backward: no path stores gradients in %s", op, prec_format_name(dy->format));
    }
    return kelem_launched(op, n);
}

#endif
