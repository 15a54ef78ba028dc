// tests/test_attention_mma_simt.cc — the flash_mma kernels themselves,
// compiled for the host and run on the CPU one host thread per CUDA thread
// (tests/simt_emu.h supplies shared memory, barriers, shuffles, cp.async,
// ldmatrix and mma as the PTX ISA defines them, mma through the
// bit-accurate H100 or A100 model).  C++ because the kernel source is: this
// is how the tiling, the masks, the chunk skipping, the double-buffered
// pipeline and the fragment bookkeeping are tested without a GPU.
//
// Property: every output (o, lse, dq, dk, dv) equals, bit for bit, the
// operation-by-operation emulation of the kernels' arithmetic
// (kernels/attention_mma_arith.h, which tests/test_attention_mma_bound.c checks
// against the check's bound and the MPFR reference), for bf16 and fp16,
// flash_mma and flash_mma_exp2, the planted bugs included, on shapes with
// ragged tiles (T = 150: three row blocks, the last partial; two heads at T = 70; D = 40: a
// partial 16-wide chunk of d; D = 128: the 32-wide side tiles), with
// cp.async copies landing at their wait and, again, at their issue (see
// tests/simt_emu.h: the two catch a missing wait and a refill too early); every
// output element is written (outputs start as NaN), no cp.async is issued into
// shared memory another warp read since the last barrier, nothing is written
// outside the outputs (guard zones) and every cp.async reads inside its
// tensor.  Twin: a kernel run with a different planted bug than the
// emulation must differ.  Host expf/logf on both sides.  SIMT_DEBUG=1 lists
// every differing element on stderr.
//
// Built at -O0 (Makefile): GCC 12.2 at -O1 and above compiles the
// truncating fp32 store of kernels/common/kelem.cuh, `bug == 2 ?
// __uint_as_float(__float_as_uint(x) & 0xFFFF0000u) : x`, with the bit casts
// as memcpy, into `x` (a miscompilation; the same in C: see the report of
// the commit that added this test).
#include "tests/simt_emu.h"

#include "kernels/attention_mma.cu"

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
}

#include <cstdio>
#include <cstdlib>

#include "kernels/attention_mma_arith.h"
#include "kernels/check/check.h"
#include "precision/rng.h"
#include "tests/test_util.h"

thread_local simt_index threadIdx, blockIdx;
thread_local simt_block *simt_cur;
const mma_arith *simt_model_bf16, *simt_model_fp16;
bool simt_eager_copies = false;

// ---- the host SIMT runtime --------------------------------------------------------------

namespace {
struct thread_arg {
    simt_block *block;
    unsigned block_id;
    unsigned tid;
    const std::function<void()> *kernel;
};

void *run_thread(void *p)
{
    const thread_arg *a = static_cast<const thread_arg *>(p);
    simt_cur = a->block;
    threadIdx = {a->tid, 0, 0};
    blockIdx = {a->block_id, 0, 0};
    (*a->kernel)();
    return nullptr;
}

// global ranges a cp.async may read
struct range {
    const unsigned char *lo, *hi;
};
std::vector<range> readable;
int bad_reads = 0, hazards = 0;
} // namespace

bool simt_readable(const void *src, int bytes)
{
    const unsigned char *p = static_cast<const unsigned char *>(src);
    for (const range &r : readable)
        if (p >= r.lo && p + bytes <= r.hi) return true;
    return false;
}

void simt_launch(unsigned grid, size_t smem_bytes, const std::function<void()> &kernel)
{
    for (unsigned b = 0; b < grid; b++) {
        simt_block blk;
        blk.smem.assign(smem_bytes, 0xA5);
        blk.chunk_reads = std::vector<std::atomic<uint32_t>>((smem_bytes + 15) / 16);
        blk.committed.resize(SIMT_THREADS);
        blk.open.resize(SIMT_THREADS);
        pthread_barrier_init(&blk.block_bar, nullptr, SIMT_THREADS);
        for (int w = 0; w < SIMT_WARPS; w++) pthread_barrier_init(&blk.warp_bar[w], nullptr, 32);
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 1 << 20);
        pthread_t th[SIMT_THREADS];
        thread_arg args[SIMT_THREADS];
        for (unsigned t = 0; t < SIMT_THREADS; t++) {
            args[t] = {&blk, b, t, &kernel};
            if (pthread_create(&th[t], &attr, run_thread, &args[t]) != 0) abort();
        }
        for (unsigned t = 0; t < SIMT_THREADS; t++) pthread_join(th[t], nullptr);
        pthread_attr_destroy(&attr);
        pthread_barrier_destroy(&blk.block_bar);
        for (int w = 0; w < SIMT_WARPS; w++) pthread_barrier_destroy(&blk.warp_bar[w]);
        bad_reads += blk.bad_reads.load();
        hazards += blk.hazards.load();
    }
}

// ---- tensors ------------------------------------------------------------------------------

namespace {
constexpr int GUARD = 64; // elements of guard zone either side of an output

template <class T> T to_t(double x);
template <> __nv_bfloat16 to_t<__nv_bfloat16>(double x) { return __float2bfloat16_rn((float)x); }
template <> __half to_t<__half>(double x) { return __float2half_rn((float)x); }
double from_t(__nv_bfloat16 x) { return __bfloat162float(x); }
double from_t(__half x) { return __half2float(x); }

// n elements with GUARD on either side, every byte 0xFF (NaN)
template <class E> struct guarded {
    std::vector<E> buf;
    explicit guarded(size_t n) : buf(n + 2 * GUARD) { memset(static_cast<void *>(buf.data()), 0xFF, buf.size() * sizeof(E)); }
    E *data() { return buf.data() + GUARD; }
    bool guards_intact() const
    {
        const unsigned char *p = reinterpret_cast<const unsigned char *>(buf.data());
        const size_t n = buf.size() * sizeof(E), g = GUARD * sizeof(E);
        for (size_t i = 0; i < g; i++)
            if (p[i] != 0xFF || p[n - 1 - i] != 0xFF) return false;
        return true;
    }
};

template <class T> void allow(const std::vector<T> &v)
{
    readable.push_back({(const unsigned char *)v.data(), (const unsigned char *)(v.data() + v.size())});
}

struct outcome {
    int64_t mismatches = 0, unwritten = 0;
    bool guards = true;
    char first[200] = "";
};

void compare(outcome &r, const char *what, int64_t i, double got, double want)
{
    if (std::isnan(got)) r.unwritten++;
    if (!(got == want) && !(std::isnan(got) && std::isnan(want))) {
        if (getenv("SIMT_DEBUG")) fprintf(stderr, "%s[%lld] kernel %.9g arithmetic %.9g\n", what, (long long)i, got, want);
        if (r.mismatches++ == 0)
            snprintf(r.first, sizeof r.first, "%s[%lld]: kernel %.9g, arithmetic %.9g", what, (long long)i, got, want);
    }
}

// The kernels on BH heads of [T, D] inputs (values of the format) with bug
// `kernel_bug`, against the arithmetic emulation with `arith_bug`.
template <class T, int EXP2, int DMAX>
outcome run(const mma_arith *model, int64_t BH, int Tn, int D, int kernel_bug, int arith_bug, prec_rng *rng)
{
    const prec_format f = std::is_same<T, __half>::value ? PREC_FP16 : PREC_BF16;
    const float scale = (float)(1.0 / sqrt((double)D));
    const int64_t n = BH * Tn * D;
    std::vector<double> in[4];
    std::vector<T> dev[4];
    for (int i = 0; i < 4; i++) {
        in[i].resize(n);
        kcheck_fill_normal(rng, in[i].data(), n, 0.0, 1.0, f);
        dev[i].resize(n);
        for (int64_t x = 0; x < n; x++) dev[i][x] = to_t<T>(in[i][x]);
    }
    readable.clear();
    for (int i = 0; i < 4; i++) allow(dev[i]);
    bad_reads = hazards = 0;
    guarded<T> o(n), dq(n), dk(n), dv(n);
    guarded<float> lse(BH * Tn);
    std::vector<float> delta(BH * Tn);
    const unsigned grid = (unsigned)(BH * ((Tn + AM_ROWS - 1) / AM_ROWS));
    const T *q = dev[0].data(), *k = dev[1].data(), *v = dev[2].data(), *g = dev[3].data();
    simt_launch(grid, am_smem_fwd<T, DMAX>(), [&] {
        mma_fwd_kernel<T, EXP2, DMAX>(q, k, v, BH, Tn, D, scale, o.data(), lse.data(), kernel_bug);
    });
    std::vector<double> o_d(n), g_d(in[3]);
    for (int64_t x = 0; x < n; x++) o_d[x] = from_t(o.data()[x]);
    for (int64_t r = 0; r < BH * Tn; r++) delta[r] = katt_mma_arith_delta(g_d.data() + r * D, o_d.data() + r * D, D);
    readable.push_back({(const unsigned char *)lse.data(), (const unsigned char *)(lse.data() + BH * Tn)});
    readable.push_back({(const unsigned char *)delta.data(), (const unsigned char *)(delta.data() + BH * Tn)});
    simt_launch(grid, am_smem_dq<T, DMAX>(), [&] {
        mma_dq_kernel<T, EXP2, DMAX>(q, k, v, g, lse.data(), delta.data(), BH, Tn, D, scale, dq.data(), kernel_bug);
    });
    simt_launch(grid, am_smem_dkv<T, DMAX>(), [&] {
        mma_dkv_kernel<T, EXP2, DMAX>(q, k, v, g, lse.data(), delta.data(), BH, Tn, D, scale, dk.data(), dv.data(),
                                      kernel_bug);
    });

    outcome r;
    r.guards = o.guards_intact() && dq.guards_intact() && dk.guards_intact() && dv.guards_intact() && lse.guards_intact();
    if (bad_reads || hazards)
        snprintf(r.first, sizeof r.first, "%d cp.async reads outside the tensors, %d write-after-read hazards", bad_reads,
                 hazards);
    const katt_mma_arith e = {model, f, EXP2, arith_bug, Tn, D, scale};
    const int64_t hn = (int64_t)Tn * D;
    std::vector<double> ao(hn), al(Tn), aq(hn), ak(hn), av(hn);
    for (int64_t h = 0; h < BH; h++) {
        const int64_t off = h * hn;
        assert_int_equal(katt_mma_arith_forward(&e, in[0].data() + off, in[1].data() + off, in[2].data() + off,
                                                ao.data(), al.data()),
                         0);
        assert_int_equal(katt_mma_arith_backward(&e, in[0].data() + off, in[1].data() + off, in[2].data() + off,
                                                 in[3].data() + off, ao.data(), al.data(), aq.data(), ak.data(),
                                                 av.data()),
                         0);
        for (int64_t x = 0; x < hn; x++) {
            compare(r, "o", off + x, from_t(o.data()[off + x]), ao[x]);
            compare(r, "dq", off + x, from_t(dq.data()[off + x]), aq[x]);
            compare(r, "dk", off + x, from_t(dk.data()[off + x]), ak[x]);
            compare(r, "dv", off + x, from_t(dv.data()[off + x]), av[x]);
        }
        for (int64_t i = 0; i < Tn; i++) compare(r, "lse", h * Tn + i, lse.data()[h * Tn + i], al[i]);
    }
    if (bad_reads || hazards) r.mismatches++;
    return r;
}

struct shape {
    int64_t BH;
    int T, D;
};
const shape shapes[] = {{1, 150, 64}, {2, 70, 16}, {1, 33, 128}, {1, 20, 40}};

template <class T, int EXP2> outcome run_shape(const mma_arith *m, const shape &s, int kbug, int abug, prec_rng *rng)
{
    return s.D > 64 ? run<T, EXP2, 128>(m, s.BH, s.T, s.D, kbug, abug, rng)
                    : run<T, EXP2, 64>(m, s.BH, s.T, s.D, kbug, abug, rng);
}

outcome run_config(const char *gen, prec_format f, int exp2, const shape &s, int kbug, int abug, prec_rng *rng)
{
    const mma_model *m = mma_model_find(gen, "mma.sync", f, PREC_FP32);
    assert_non_null(m);
    simt_model_bf16 = &mma_model_find(gen, "mma.sync", PREC_BF16, PREC_FP32)->arith;
    simt_model_fp16 = &mma_model_find(gen, "mma.sync", PREC_FP16, PREC_FP32)->arith;
    if (f == PREC_BF16)
        return exp2 ? run_shape<__nv_bfloat16, 1>(&m->arith, s, kbug, abug, rng)
                    : run_shape<__nv_bfloat16, 0>(&m->arith, s, kbug, abug, rng);
    return exp2 ? run_shape<__half, 1>(&m->arith, s, kbug, abug, rng) : run_shape<__half, 0>(&m->arith, s, kbug, abug, rng);
}

void expect_bitwise(const char *gen, prec_format f, int exp2, const shape &s, int bug, prec_rng *rng)
{
    const outcome r = run_config(gen, f, exp2, s, bug, bug, rng);
    print_message("%s %s %s bug %d BH %lld T %d D %d: %lld mismatches, %lld unwritten, guards %s\n", gen,
                  prec_format_name(f), exp2 ? "flash_mma_exp2" : "flash_mma", bug, (long long)s.BH, s.T, s.D,
                  (long long)r.mismatches, (long long)r.unwritten, r.guards ? "intact" : "BROKEN");
    if (r.mismatches || r.unwritten || !r.guards)
        fail_msg("%s %s exp2 %d bug %d T %d D %d: %s", gen, prec_format_name(f), exp2, bug, s.T, s.D, r.first);
}
} // namespace

static void test_kernels_equal_arithmetic(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("attention_mma_simt"));
    for (const shape &s : shapes) {
        expect_bitwise("h100", PREC_BF16, 0, s, KBUG_NONE, &rng);
        expect_bitwise("h100", PREC_FP16, 1, s, KBUG_NONE, &rng);
    }
    expect_bitwise("h100", PREC_BF16, 1, shapes[3], KBUG_NONE, &rng);
    expect_bitwise("h100", PREC_FP16, 0, shapes[1], KBUG_NONE, &rng);
    expect_bitwise("a100", PREC_BF16, 0, shapes[1], KBUG_NONE, &rng);
    expect_bitwise("a100", PREC_FP16, 1, shapes[2], KBUG_NONE, &rng);
    simt_eager_copies = true; // copies land at issue: a buffer refilled while still read would show
    expect_bitwise("h100", PREC_BF16, 0, shapes[0], KBUG_NONE, &rng);
    expect_bitwise("h100", PREC_FP16, 1, shapes[2], KBUG_NONE, &rng);
    simt_eager_copies = false;
}

static void test_planted_bugs_as_emulated(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("attention_mma_simt_bugs"));
    expect_bitwise("h100", PREC_BF16, 0, shapes[3], KBUG_DROP_TERM, &rng);
    expect_bitwise("h100", PREC_FP16, 1, shapes[2], KBUG_DROP_TERM, &rng);
    expect_bitwise("h100", PREC_BF16, 1, shapes[1], KBUG_TRUNCATE_OUTPUT, &rng);
}

static void test_twin_other_bug_differs(void **state)
{
    (void)state;
    prec_rng rng;
    prec_rng_seed(&rng, test_seed("attention_mma_simt_twin"));
    const outcome a = run_config("h100", PREC_BF16, 0, shapes[3], KBUG_DROP_TERM, KBUG_NONE, &rng);
    const outcome b = run_config("h100", PREC_FP16, 0, shapes[1], KBUG_NONE, KBUG_TRUNCATE_OUTPUT, &rng);
    print_message("twins: %lld and %lld mismatches\n", (long long)a.mismatches, (long long)b.mismatches);
    assert_true(a.mismatches > 0);
    assert_true(b.mismatches > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kernels_equal_arithmetic),
        cmocka_unit_test(test_planted_bugs_as_emulated),
        cmocka_unit_test(test_twin_other_bug_differs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
