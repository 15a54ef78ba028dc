/* precision/mma.c — the parameter sets of the matrix-unit models (mma.h) and
 * host conveniences around the arithmetic.
 *
 * Each entry: generation, route, instruction K, then the block arithmetic
 * {in, out, L, F, align, output rounding, output fraction bits, zero exponent}.
 * The numbers and where they come from:
 *
 *   F (fraction bits after alignment): MMA-Sim nv_ptx/sim.py F_table
 *     Volta 23, Ampere 24, Hopper 25, Blackwell 25; fp8 on Hopper (wgmma) 13
 *     with rho "RZ-E8M13".  Khattak-Mikaitis models (models/H100TC.m etc.): neab =
 *     F - 23 = 0 (V100TC), 1 (A100TC), 2 (H100TC, B200TC), -10 (H100TC fp8).
 *   L (products per block): MMA-Sim L_max_table = 8/16/32/32 bytes of input
 *     (Volta/Ampere/Hopper/Blackwell) divided by the element size, so V100
 *     fp16 4; A100 fp16/bf16 8, tf32 4; H100/B200 fp16/bf16 16, tf32 8, fp8
 *     32.  Khattak-Mikaitis "fma" agrees (V100 4; A100 8, tf32 4; H100 16,
 *     tf32 8, fp8 32).  Fasi et al. 2021, sec. "Inner products": 4 products
 *     per block on V100, 8 on A100 (fp16, bf16) and 4 (tf32).
 *   Output rounding: RZ into fp32, RNE into fp16 (MMA-Sim rho RZ-FP32 /
 *     RNE-FP16; Khattak-Mikaitis frmode 'rz' / 'rne'; Fasi et al. 2021 found
 *     RZ normalisation on V100, T4 and A100).
 *   Alignment: truncation (MMA-Sim truncated_fused_sum uses trunc; Fasi et
 *     al. 2021: bits shifted out are truncated; Khattak-Mikaitis: "multi-
 *     operand alignment uses truncation").
 *   Zero exponent: MMA-Sim t_fdpa e_zero in its later revision: Volta -131,
 *     Turing/Ampere -132, Hopper/Blackwell -133; Khattak-Mikaitis
 *     min_exp_limit = -133 (H100TC, B200TC).
 *   Subnormal inputs and outputs are kept on every generation (Fasi et al.
 *     2021; Khattak-Mikaitis in_subnormals = out_subnormals = 1).
 *
 * Where a number is a hypothesis rather than a published measurement, the
 * entry's note says so; `ulpscope probe` on the hardware settles it. */
#include "precision/mma.h"

#include <stddef.h>
#include <string.h>

#define SRC_FASI "Fasi, Higham, Mikaitis, Pranesh, PeerJ CS 7:e330 (2021)"
#define SRC_SIM "MMA-Sim (Xie et al., arXiv:2511.10909, 2025)"
#define SRC_KM "Khattak & Mikaitis, arXiv:2512.07004 (2025)"

/* Zero results keep IEEE signs (MMA-Sim) except where measured otherwise:
 * the H100 (an H200 here) returns +0 for every zero result, where IEEE
 * rounding gives -0 for a sum of negative zeros or a negative sum that
 * underflows (fp16 outputs: `ulpscope probe --validate`; fp32 outputs: the
 * zero_sign probe; docs/results-mma.md), so HARITH marks the H100 entries
 * positive_zero. */
#define ARITH(in_, out_, L_, F_, mode_, fo_, z_) \
    {(in_), (out_), (L_), (F_), MMA_ALIGN_TRUNCATE, (mode_), (fo_), (z_), false, false, false, MMA_SPLIT_NONE, 0}
#define HARITH(in_, out_, L_, F_, mode_, fo_, z_) \
    {(in_), (out_), (L_), (F_), MMA_ALIGN_TRUNCATE, (mode_), (fo_), (z_), false, false, true, MMA_SPLIT_NONE, 0}
#define SPLIT_ARITH(in_, out_, mode_, fo_) \
    {(in_), (out_), 16, 25, MMA_ALIGN_TRUNCATE, (mode_), (fo_), -133, false, false, true, MMA_SPLIT_CHAIN12, 32}

static const mma_model models[] = {
    /* ---- V100 (Volta): fp16 only; HMMA.884, instruction K = 4 ---- */
    {"v100", "mma.sync", 4, ARITH(PREC_FP16, PREC_FP32, 4, 23, PREC_RZ, 23, -131), NULL,
     SRC_FASI "; " SRC_SIM " (F=23, L=4, e_zero=-131); " SRC_KM " (V100TC neab=0, fma=4)"},
    {"v100", "mma.sync", 4, ARITH(PREC_FP16, PREC_FP16, 4, 23, PREC_RNE, 10, -131), NULL,
     SRC_SIM " (rho RNE-FP16); " SRC_KM " (V100TC frmode rne)"},

    /* ---- A100 (Ampere): mma.sync m16n8k16 (fp16, bf16), m16n8k8 (tf32) ---- */
    {"a100", "mma.sync", 16, ARITH(PREC_FP16, PREC_FP32, 8, 24, PREC_RZ, 23, -132), NULL,
     SRC_FASI " (8-term blocks); " SRC_SIM " (F=24, L=16B/2, e_zero=-132); " SRC_KM " (A100TC neab=1, fma=8)"},
    {"a100", "mma.sync", 16, ARITH(PREC_FP16, PREC_FP16, 8, 24, PREC_RNE, 10, -132), NULL,
     SRC_SIM " (rho RNE-FP16); " SRC_KM " (A100TC frmode rne)"},
    {"a100", "mma.sync", 16, ARITH(PREC_BF16, PREC_FP32, 8, 24, PREC_RZ, 23, -132), NULL,
     SRC_FASI "; " SRC_SIM "; " SRC_KM " (A100TC fma=8)"},
    {"a100", "mma.sync", 8, ARITH(PREC_TF32, PREC_FP32, 4, 24, PREC_RZ, 23, -132), NULL,
     SRC_FASI " (4-term tf32 blocks); " SRC_SIM " (L=16B/4); " SRC_KM " (A100TC tf32 fma=4)"},
    /* The A100 has no fp8 units: code written for it upcasts fp8 and runs the
     * 16-bit path.  The upcast to bf16 is exact for e4m3 and e5m2, so the
     * arithmetic is the bf16 block on the fp8 values. */
    {"a100", "mma.sync", 16, ARITH(PREC_E4M3, PREC_FP32, 8, 24, PREC_RZ, 23, -132),
     "no fp8 units: exact upcast to bf16, bf16 mma.sync path", SRC_SIM " (Ampere bf16 parameters)"},
    {"a100", "mma.sync", 16, ARITH(PREC_E5M2, PREC_FP32, 8, 24, PREC_RZ, 23, -132),
     "no fp8 units: exact upcast to bf16, bf16 mma.sync path", SRC_SIM " (Ampere bf16 parameters)"},

    /* ---- H100 (Hopper): the sm_80 mma.sync instructions run on Hopper units ---- */
    {"h100", "mma.sync", 16, HARITH(PREC_FP16, PREC_FP32, 16, 25, PREC_RZ, 23, -133), NULL,
     SRC_SIM " (Hopper mma: F=25, L=32B/2, e_zero=-133); " SRC_KM " (H100TC neab=2, fma=16)"},
    {"h100", "mma.sync", 16, HARITH(PREC_FP16, PREC_FP16, 16, 25, PREC_RNE, 10, -133), NULL,
     SRC_SIM " (rho RNE-FP16); " SRC_KM " (H100TC frmode rne)"},
    {"h100", "mma.sync", 16, HARITH(PREC_BF16, PREC_FP32, 16, 25, PREC_RZ, 23, -133), NULL,
     SRC_SIM "; " SRC_KM},
    {"h100", "mma.sync", 8, HARITH(PREC_TF32, PREC_FP32, 8, 25, PREC_RZ, 23, -133), NULL,
     SRC_SIM " (L=32B/4); " SRC_KM " (H100TC tf32 fma=8)"},
    /* fp8 mma.sync (m16n8k32, an sm_89 instruction) assembles for sm_90a,
     * but neither MMA-Sim nor Khattak-Mikaitis lists it for Hopper.  SASS
     * (cuobjdump of probe_sm90a.o): F2FP.F16.E4M3.UNPACK_B then two
     * HMMA.16816.F32 (HMMA.16816.F16 + HADD2 for fp16 out).  `ulpscope probe`
     * on an H200 measured block_size 2 with positions {0,1} together, F 24
     * and round-to-nearest for c + products: two fp16 sub-blocks from zero,
     * c added by FADD.  Of the add orders (mma_split) only "c + block(S2
     * starting from P1)" reproduced the hardware (0 mismatches in 10^5 random
     * dots per format; the others 11883 to 23862), and the SASS has one FADD
     * (HADD2) per output, as that order needs. */
    {"h100", "mma.sync", 32, SPLIT_ARITH(PREC_E4M3, PREC_FP32, PREC_RZ, 23),
     "emulated: fp16 HMMA on S1={k%4<2}, S2={k%4>=2} from zero, c added with FADD", "ulpscope probe (H200, SASS)"},
    {"h100", "mma.sync", 32, SPLIT_ARITH(PREC_E4M3, PREC_FP16, PREC_RNE, 10),
     "emulated: fp16 HMMA.F16 sub-blocks from zero, c added with HADD2", "ulpscope probe (H200, SASS)"},
    {"h100", "mma.sync", 32, SPLIT_ARITH(PREC_E5M2, PREC_FP32, PREC_RZ, 23),
     "emulated: fp16 HMMA on S1={k%4<2}, S2={k%4>=2} from zero, c added with FADD", "ulpscope probe (H200, SASS)"},
    {"h100", "mma.sync", 32, SPLIT_ARITH(PREC_E5M2, PREC_FP16, PREC_RNE, 10),
     "emulated: fp16 HMMA.F16 sub-blocks from zero, c added with HADD2", "ulpscope probe (H200, SASS)"},
    {"h100", "wgmma", 16, HARITH(PREC_FP16, PREC_FP32, 16, 25, PREC_RZ, 23, -133), NULL,
     SRC_SIM " (WGMMA: F=25, L=32B/2); " SRC_KM " (H100TC)"},
    {"h100", "wgmma", 16, HARITH(PREC_FP16, PREC_FP16, 16, 25, PREC_RNE, 10, -133), NULL,
     SRC_SIM " (RNE-FP16); " SRC_KM},
    {"h100", "wgmma", 16, HARITH(PREC_BF16, PREC_FP32, 16, 25, PREC_RZ, 23, -133), NULL, SRC_SIM "; " SRC_KM},
    {"h100", "wgmma", 8, HARITH(PREC_TF32, PREC_FP32, 8, 25, PREC_RZ, 23, -133), NULL, SRC_SIM "; " SRC_KM},
    /* fp8 on Hopper: 13 fraction bits after alignment and an fp32 result
     * truncated to 13 fraction bits (e8m13).  DeepSeek-V3 (arXiv:2412.19437,
     * sec. 3.3.2) measured about 14 bits of accumulation precision for FP8
     * GEMM on H800, which is what this gives. */
    {"h100", "wgmma", 32, HARITH(PREC_E4M3, PREC_FP32, 32, 13, PREC_RZ, 13, -133), NULL,
     SRC_SIM " (F=13, rho RZ-E8M13, L=32); " SRC_KM " (H100TC fp8 neab=-10, fma=32)"},
    {"h100", "wgmma", 32, HARITH(PREC_E4M3, PREC_FP16, 32, 13, PREC_RNE, 10, -133), NULL, SRC_SIM " (RNE-FP16)"},
    {"h100", "wgmma", 32, HARITH(PREC_E5M2, PREC_FP32, 32, 13, PREC_RZ, 13, -133), NULL,
     SRC_SIM " (F=13, RZ-E8M13); " SRC_KM " (H100TC fp8)"},
    {"h100", "wgmma", 32, HARITH(PREC_E5M2, PREC_FP16, 32, 13, PREC_RNE, 10, -133), NULL, SRC_SIM " (RNE-FP16)"},

    /* ---- B200 (Blackwell): legacy mma.sync and tcgen05 ---- */
    {"b200", "mma.sync", 16, ARITH(PREC_FP16, PREC_FP32, 16, 25, PREC_RZ, 23, -133), NULL,
     SRC_SIM " (Blackwell mma: F=25, L=32B/2)"},
    {"b200", "mma.sync", 16, ARITH(PREC_FP16, PREC_FP16, 16, 25, PREC_RNE, 10, -133), NULL, SRC_SIM},
    {"b200", "mma.sync", 16, ARITH(PREC_BF16, PREC_FP32, 16, 25, PREC_RZ, 23, -133), NULL, SRC_SIM},
    {"b200", "mma.sync", 8, ARITH(PREC_TF32, PREC_FP32, 8, 25, PREC_RZ, 23, -133), NULL, SRC_SIM},
    {"b200", "tcgen05", 16, ARITH(PREC_FP16, PREC_FP32, 16, 25, PREC_RZ, 23, -133), NULL,
     SRC_SIM " (tcgen05: F=25, L=32B/2); " SRC_KM " (B200TC neab=2, fma=16, min_exp_limit=-133)"},
    /* Khattak-Mikaitis B200TC lowers the alignment floor to -15 for fp16 out. */
    {"b200", "tcgen05", 16, ARITH(PREC_FP16, PREC_FP16, 16, 25, PREC_RNE, 10, -15), NULL,
     SRC_KM " (B200TC fp16 out: frmode rne, min_exp_limit=-15); " SRC_SIM " (RNE-FP16)"},
    {"b200", "tcgen05", 16, ARITH(PREC_BF16, PREC_FP32, 16, 25, PREC_RZ, 23, -133), NULL, SRC_SIM "; " SRC_KM},
    {"b200", "tcgen05", 8, ARITH(PREC_TF32, PREC_FP32, 8, 25, PREC_RZ, 23, -133), NULL,
     SRC_SIM "; " SRC_KM " (B200TC tf32 fma=8)"},
    /* Blackwell keeps fp8 at full accumulator precision (no e8m13 output). */
    {"b200", "tcgen05", 32, ARITH(PREC_E4M3, PREC_FP32, 32, 25, PREC_RZ, 23, -133), NULL,
     SRC_SIM " (tcgen05 fp8: F=25, RZ-FP32); " SRC_KM " (B200TC fp8 fma=32, neab=2)"},
    {"b200", "tcgen05", 32, ARITH(PREC_E4M3, PREC_FP16, 32, 25, PREC_RNE, 10, -133), NULL, SRC_SIM},
    {"b200", "tcgen05", 32, ARITH(PREC_E5M2, PREC_FP32, 32, 25, PREC_RZ, 23, -133), NULL, SRC_SIM "; " SRC_KM},
    {"b200", "tcgen05", 32, ARITH(PREC_E5M2, PREC_FP16, 32, 25, PREC_RNE, 10, -133), NULL, SRC_SIM},
};

static const int n_models = (int)(sizeof models / sizeof models[0]);

int mma_model_count(void) { return n_models; }

const mma_model *mma_model_at(int i) { return i >= 0 && i < n_models ? &models[i] : NULL; }

const mma_model *mma_model_find(const char *gen, const char *route, prec_format in, prec_format out)
{
    for (int i = 0; i < n_models; i++)
        if (strcmp(models[i].gen, gen) == 0 && strcmp(models[i].route, route) == 0 &&
            models[i].arith.in == in && models[i].arith.out == out)
            return &models[i];
    return NULL;
}

const char *mma_gen_names(void) { return "v100, a100, h100, b200"; }

bool mma_gen_known(const char *gen)
{
    for (int i = 0; i < n_models; i++)
        if (strcmp(models[i].gen, gen) == 0) return true;
    return false;
}

const char *mma_align_name(mma_align a)
{
    static const char *const names[MMA_ALIGN_COUNT] = {"truncate", "floor", "nearest-even"};
    return (unsigned)a < MMA_ALIGN_COUNT ? names[a] : "?";
}

const char *mma_split_name(mma_split sp)
{
    static const char *const names[MMA_SPLIT_COUNT] = {"none", "(c+P1)+P2", "c+(P1+P2)", "(c+P2)+P1",
                                                       "c+block(S2 from P1)", "c+block(S1 from P2)"};
    return (unsigned)sp < MMA_SPLIT_COUNT ? names[sp] : "?";
}

void mma_store(prec_format f, void *base, long idx, double x)
{
    /* tf32 operands live in fp32 registers and the unit reads their top 19
     * bits, so a tf32 slot holds any fp32 word (mma_decode truncates). */
    const uint64_t bits = prec_encode(x, f == PREC_TF32 ? PREC_FP32 : f);
    switch (mma_elem_bytes(f)) {
    case 4: ((uint32_t *)base)[idx] = (uint32_t)bits; break;
    case 2: ((uint16_t *)base)[idx] = (uint16_t)bits; break;
    default: ((uint8_t *)base)[idx] = (uint8_t)bits; break;
    }
}

double mma_dot_values(const mma_arith *p, int k, const double *a, const double *b, double c)
{
    /* Chunks of 256 products: a multiple of every block size (<= 64 and a
     * power of two in the table), so chunking does not move a block edge. */
    uint32_t abuf[256], bbuf[256];
    uint32_t cb = (uint32_t)prec_encode(c, p->out);
    for (int i0 = 0; i0 < k; i0 += 256) {
        const int n = k - i0 < 256 ? k - i0 : 256;
        for (int i = 0; i < n; i++) {
            mma_store(p->in, abuf, i, a[i0 + i]);
            mma_store(p->in, bbuf, i, b[i0 + i]);
        }
        cb = mma_dot(p, n, abuf, bbuf, cb);
    }
    return prec_decode(cb, p->out);
}

/* ---- error bounds (derivation in mma.h) ------------------------------------ */

static int format_emin(prec_format f)
{
    switch (f) {
    case PREC_FP16: return -14;
    case PREC_E4M3: return -6;
    case PREC_E5M2: return -14;
    default: return -126; /* fp32, tf32, bf16 */
    }
}

double mma_exp_scale(prec_format f, double x)
{
    const double lo = ldexp(1.0, format_emin(f));
    return fabs(x) > lo ? fabs(x) : lo;
}

double mma_align_bound(const mma_arith *p, int nonzero_terms, double emax_scale)
{
    return (double)nonzero_terms * ldexp(emax_scale, -p->frac_bits);
}

double mma_out_bound(const mma_arith *p, double s_abs)
{
    const int fo = p->out_frac_bits, emin = format_emin(p->out);
    const double half = p->out_mode == PREC_RNE ? 0.5 : 1.0;
    return half * (ldexp(s_abs, -fo) + ldexp(1.0, emin - fo));
}

double mma_block_bound(const mma_arith *p, int n, const double *a, const double *b, double c_abs, double y_abs)
{
    double M = ldexp(1.0, p->zero_exp);
    int N = 0;
    if (c_abs > 0) {
        const double e = mma_exp_scale(p->out, c_abs);
        if (e > M) M = e;
        N++;
    }
    for (int i = 0; i < n; i++) {
        if (a[i] == 0 || b[i] == 0) continue;
        const double e = mma_exp_scale(p->in, a[i]) * mma_exp_scale(p->in, b[i]);
        if (e > M) M = e;
        N++;
    }
    const double A = mma_align_bound(p, N, M);
    return A + mma_out_bound(p, y_abs + A);
}
